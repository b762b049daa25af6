#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_docs.sh — docs/ is for users: no page carries a run log's marks outside its code examples
# (a commit id, a load average, "issue N", a dated run) or cites a file that is not public
# (FACTS.md, "the seed map"). A page says what to expect and the command that measures it; raw
# runs go to bench/results/ and history is git's.
set -u
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
bad=$(awk '
  FNR == 1 { code = 0 }
  /^```/ { code = !code; next }
  !code && tolower($0) ~ /(commits? [0-9a-f]{7,40}([^0-9a-z]|$))|( at [0-9a-f]{7,12}([^0-9a-z]|$))|(load average)|(load [0-9])|(issues? #?[0-9]+)|(facts\.md)|(seed map)|(20[0-9][0-9]-[0-9][0-9]-[0-9][0-9])/ {
    print FILENAME ":" FNR ": " substr($0, 1, 120)
  }' "$src"/docs/*.md)
if [ -n "$bad" ]; then
  echo "FAIL: run-log marks or private citations in docs/ (say what to expect and its command):"
  echo "$bad"
  exit 1
fi
echo "test_docs: ok"
