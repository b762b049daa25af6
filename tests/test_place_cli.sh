#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_place_cli.sh BUILD_DIR — `strata place` refuses sizes whose prediction would not be a
# finite number (--bytes, --params, --activation-bytes past their limits), with the limit in
# the message and exit 2, and still predicts finite times at the limits.
set -u
build=${1:?usage: test_place_cli.sh BUILD_DIR}
strata="$build/strata"
[ -x "$strata" ] || { echo "test_place_cli: $strata is missing: skipped"; exit 77; }
src=$(cd "$(dirname "$0")/.." && pwd)
matrix="$src/tests/data/links-metro-2-sites.json"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

for args in "--bytes 1e308" "--pipeline 2 --params 1e308" \
  "--pipeline 2 --params 1B --activation-bytes 1e308" "--pipeline 2 --params 1B --param-bytes 1e300"; do
  "$strata" place "$matrix" $args >"$out" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "place $args: exit $rc, want 2"
  grep -q "at most" "$out" || fail "place $args: no limit named: $(cat "$out")"
  grep -Eqi "inf|nan" "$out" && fail "place $args printed a non-finite number: $(cat "$out")"
done
for args in "--bytes 1048576G" "--pipeline 2 --params 1e15 --param-bytes 64 --activation-bytes 1048576G"; do
  "$strata" place "$matrix" $args >"$out" 2>&1 || fail "place $args at the limit failed: $(cat "$out")"
  grep -Eqi "inf|nan" "$out" && fail "place $args printed a non-finite number: $(cat "$out")"
done
[ $failures -eq 0 ] && echo "test_place_cli: ok"
exit $((failures != 0))
