#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_exports.sh BUILD_DIR — libstrata.so exports exactly the API of include/strata.h: the
# functions declared there (and in strata_kv.h) with STRATA_API, no more (an internal symbol a program could link to
# and come to depend on) and no fewer (a declared function a program cannot link). And the
# runtime does not need libyaml: topology files are the planner's, inside the command. And the
# NCCL plugin exports its two tables alone.
set -uo pipefail
build=${1:?usage: test_exports.sh BUILD_DIR}
source_dir=${STRATA_SOURCE_DIR:-$(dirname "$0")/..}
library=$build/libstrata.so
[ -e "$library" ] || { echo "FAIL: $library not built"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# declared: every `STRATA_API ... name(` in the header, declarations over several lines included
python3 - "$source_dir/include/strata.h" "$source_dir/include/strata_kv.h" >"$tmp/declared" <<'PY'
import re, sys
text = "".join(open(path).read() for path in sys.argv[1:])
text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
text = re.sub(r"^\s*#.*$", " ", text, flags=re.M)
for declaration in re.findall(r"\bSTRATA_API\b([^;{]*)", text):
    name = re.search(r"(\w+)\s*\(", declaration)
    if name:
        print(name.group(1))
PY
sort -u "$tmp/declared" -o "$tmp/declared"
# exported: defined dynamic symbols, less the version node (type A) and the @@VERSION suffix
nm -D --defined-only "$library" | awk '$2 != "A" { sub(/@.*/, "", $3); print $3 }' | sort -u >"$tmp/exported"

[ -s "$tmp/declared" ] || fail "no STRATA_API declaration found in include/strata.h"
extra=$(comm -13 "$tmp/declared" "$tmp/exported")
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
[ -z "$extra" ] || fail "exported but not declared with STRATA_API in strata.h:" $extra
[ -z "$missing" ] || fail "declared with STRATA_API but not exported:" $missing
echo "libstrata.so: $(wc -l <"$tmp/exported") symbols exported, $(wc -l <"$tmp/declared") declared"

needed=$(readelf -d "$library" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "NEEDED: $needed"
case " $needed" in *" libyaml"*) fail "libstrata.so needs libyaml" ;; esac

# The NCCL network plugin exports the two tables NCCL looks up by name and nothing else: the
# static runtime inside it stays hidden (src/ncclnet/ncclnet.map).
plugin=$build/libnccl-net-strata.so
if [ -e "$plugin" ]; then
  plugin_exports=$(nm -D --defined-only "$plugin" | awk '$2 != "A" { print $3 }' | sort | tr '\n' ' ')
  [ "$plugin_exports" = "ncclNetPlugin_v12 ncclNetPlugin_v8 " ] ||
    fail "libnccl-net-strata.so exports: $plugin_exports(want ncclNetPlugin_v12 ncclNetPlugin_v8)"
  echo "libnccl-net-strata.so exports: $plugin_exports"
else
  fail "$plugin not built"
fi

[ "$failures" = 0 ] && echo "test_exports: ok" || echo "test_exports: $failures failure(s)"
[ "$failures" = 0 ]
