#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_exports.sh BUILD_DIR — libstrata.so and libstrata.a export exactly the API of
# include/strata.h: the functions declared there (and in strata_kv.h) with STRATA_API, no more (an
# internal symbol a program could link to and come to depend on, or clash with) and no fewer (a
# declared function a program cannot link). Neither holds a test hook. And the runtime does not
# need libyaml: topology files are the planner's, inside the command. And the NCCL plugin
# exports its two tables alone.
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

# libstrata.a: its objects are prelinked with the internal names made local (CMakeLists.txt), so a
# static link sees the same names as a dynamic one: no internal one (shm_wait, kv_*, ...) can
# clash with a program's own.
archive=$build/libstrata.a
if [ -e "$archive" ]; then
  nm -g --defined-only "$archive" | awk 'NF == 3 { print $3 }' | sort -u >"$tmp/archived"
  extra=$(comm -13 "$tmp/declared" "$tmp/archived")
  missing=$(comm -23 "$tmp/declared" "$tmp/archived")
  [ -z "$extra" ] || fail "libstrata.a defines global symbols not declared with STRATA_API:" $extra
  [ -z "$missing" ] || fail "declared with STRATA_API but not in libstrata.a:" $missing
  echo "libstrata.a: $(wc -l <"$tmp/archived") global symbols"
else
  fail "$archive not built"
fi

# The test hooks (*_for_test, weights_debug_*: fault injection) are compiled into the tests'
# library alone (STRATA_TEST_HOOKS): not one, not even a local symbol, in what is installed.
hooks='_for_test$|^weights_debug_'
for lib in "$library" "$archive"; do
  found=$(nm "$lib" 2>/dev/null | awk '{ print $NF }' | grep -E "$hooks" | sort -u | tr '\n' ' ')
  [ -z "$found" ] || fail "$(basename "$lib") holds test hooks: $found"
done
# and the pattern finds them where they are (a test build's internal library)
if [ -e "$build/libstrata_internal.a" ] && [ -d "$build/tests" ]; then
  [ -n "$(nm "$build/libstrata_internal.a" | awk '{ print $NF }' | grep -E "$hooks")" ] ||
    fail "libstrata_internal.a of a test build has no test hooks: the check above finds nothing"
fi

# the SONAME is libstrata.so.MAJOR of the header's version (docs/api.md, "Versions and the ABI")
major=$(sed -n 's/^#define STRATA_VERSION_MAJOR \([0-9]*\).*/\1/p' "$source_dir/include/strata.h")
soname=$(readelf -d "$library" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$major" ] && [ "$soname" = "libstrata.so.$major" ] ||
  fail "SONAME '$soname', expected libstrata.so.$major (STRATA_VERSION_MAJOR)"

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
