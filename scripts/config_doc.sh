#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# config_doc.sh [BUILD_DIR] — rewrites the generated tables of docs/config.md (between its two
# "generated" markers) from the settings table, src/boot/settings.c, as BUILD_DIR/tests/config_doc
# prints it (a test build: make test, or cmake -DSTRATA_BUILD_TESTS=ON). Run it after changing a
# row; tests/test_config_doc.sh fails until the page matches.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
generator=$build/tests/config_doc
[ -x "$generator" ] || { echo "config_doc.sh: $generator not built (a test build has it)" >&2; exit 2; }
page=docs/config.md
begin='<!-- generated from src/boot/settings.c by scripts/config_doc.sh: edit the table there -->'
end='<!-- end of the generated tables -->'
grep -qxF "$begin" "$page" && grep -qxF "$end" "$page" ||
  { echo "config_doc.sh: $page lacks the markers" >&2; exit 1; }
tables=$(mktemp)
trap 'rm -f "$tables" "$page.new"' EXIT
"$generator" --markdown >"$tables"
awk -v begin="$begin" -v end="$end" -v tables="$tables" '
  $0 == begin { print; print ""; while ((getline line < tables) > 0) print line; print ""; skip = 1; next }
  $0 == end { skip = 0 }
  !skip { print }' "$page" >"$page.new"
mv "$page.new" "$page"
echo "config_doc.sh: $page rewritten"
