#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_config_doc.sh BUILD_DIR — the settings table (src/boot/settings.c) and what it drives do
# not drift apart:
#   - docs/config.md's generated tables are what the table prints now (scripts/config_doc.sh
#     rewrites them);
#   - every environment variable the sources name (a "STRATA_*" string in src/ or tools/ that is
#     not a name of the public headers, and every getenv("...") of them) is a row;
#   - every row of the command's or another library's is still named in the sources;
#   - a bad KV variable fails strata_kv_agent_create with STRATA_ERR_CONFIG (tests/test_abi.c
#     and test_boot_env.c hold the rest).
set -uo pipefail
build=${1:?usage: test_config_doc.sh BUILD_DIR}
source_dir=${STRATA_SOURCE_DIR:-$(dirname "$0")/..}
generator=$build/tests/config_doc
[ -x "$generator" ] || { echo "FAIL: $generator not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

page=$source_dir/docs/config.md
awk '/^<!-- generated from src\/boot\/settings.c/ { on = 1; next }
     /^<!-- end of the generated tables -->/ { on = 0 }
     on' "$page" | sed '1{/^$/d}' | sed '${/^$/d}' >"$tmp/page"
"$generator" --markdown >"$tmp/table"
[ -s "$tmp/page" ] || fail "docs/config.md has no generated tables (its markers are missing)"
diff -u "$tmp/table" "$tmp/page" >"$tmp/diff" ||
  fail "docs/config.md differs from the settings table: run scripts/config_doc.sh $build" \
    "$(head -20 "$tmp/diff")"

"$generator" --names >"$tmp/rows"
awk '{ print $2 }' "$tmp/rows" | sort -u >"$tmp/names"
# names the public headers define (status codes, enum values, macros; not what their comments
# mention) are not variables
python3 - "$source_dir"/include/*.h >"$tmp/api" <<'PY'
import re, sys
text = "".join(open(path).read() for path in sys.argv[1:])
text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
print("\n".join(sorted(set(re.findall(r"\bSTRATA_[A-Z0-9_]+", text)))))
PY
# env_names.c lists the harness's names and misspellings on purpose: not variables strata reads
( cd "$source_dir" && grep -rhoE --exclude=env_names.c '"STRATA_[A-Z0-9_]+"' src tools && \
  grep -rhoE 'getenv\("[A-Za-z0-9_]+"\)' src tools | sed 's/getenv(//; s/)$//' ) |
  tr -d '"' | grep -v '^STRATA_ERR_' | sort -u >"$tmp/named"
comm -23 "$tmp/named" "$tmp/api" >"$tmp/variables"
[ -s "$tmp/variables" ] || fail "found no variable named in src/ or tools/"
missing=$(comm -23 "$tmp/variables" "$tmp/names" | tr '\n' ' ')
[ -z "$missing" ] || fail "read in src/ or tools/ but not a row of src/boot/settings.c:" $missing
for name in $(awk '$1 == "command" || $1 == "foreign" { print $2 }' "$tmp/rows"); do
  grep -rqF "\"$name\"" "$source_dir/src" "$source_dir/tools" --exclude=settings.c ||
    fail "$name is a row of src/boot/settings.c but nothing in src/ or tools/ names it"
done
echo "$(wc -l <"$tmp/variables") variables named in the sources, $(wc -l <"$tmp/names") in the table"

[ "$failures" = 0 ] && echo "test_config_doc: ok" || echo "test_config_doc: $failures failure(s)"
[ "$failures" = 0 ]
