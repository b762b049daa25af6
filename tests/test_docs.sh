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
  code { next }
  # a commit id: 7 to 40 hex digits with a letter and a digit, after "commit" or "at"
  function has_commit_id(line,    rest, word) {
    rest = line
    while (match(rest, /(^|[^a-z])(commits?|at) [0-9a-f]+/)) {
      word = substr(rest, RSTART, RLENGTH)
      sub(/^.* /, "", word)
      if (length(word) >= 7 && length(word) <= 40 && word ~ /[a-f]/ && word ~ /[0-9]/) return 1
      rest = substr(rest, RSTART + RLENGTH)
    }
    return 0
  }
  {
    line = tolower($0)
    if (has_commit_id(line) || line ~ /load average|load [0-9]|issues? #?[0-9]+|facts\.md|seed map|20[0-9][0-9]-[0-9][0-9]-[0-9][0-9]/)
      print FILENAME ":" FNR ": " substr($0, 1, 120)
  }' "$src"/docs/*.md)
if [ -n "$bad" ]; then
  echo "FAIL: run-log marks or private citations in docs/ (say what to expect and its command):"
  echo "$bad"
  exit 1
fi
echo "test_docs: ok"
