#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_demo.sh BUILD_DIR — `strata demo layer4` (make demo's layer-4 scene) on 2 local ranks: the
# DiLoCo outer step matches the one recomputed locally and both weight versions reach the
# subscriber bit for bit (the command checks; this test reads its verdict and exit status); one
# rank, or an unknown scene, is refused with status 2.
set -u
build=${1:?usage: test_demo.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "test_demo: $strata is missing"; exit 1; }
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bounded() { timeout -k 2 60 "$@"; }

out=$(bounded "$strata" launch -n 2 -- "$strata" demo layer4 2>&1)
rc=$?
echo "$out"
[ $rc -eq 0 ] || fail "demo layer4 on 2 ranks exited $rc"
echo "$out" | grep -q "max relative error .*: ok$" || fail "no checked DiLoCo outer step"
[ "$(echo "$out" | grep -c "bit for bit$")" -eq 2 ] || fail "not both weight versions checked"
echo "$out" | grep -q "^layer 4: the outer step and both versions checked, all correct$" ||
  fail "no final verdict"

bounded "$strata" launch -n 1 -- "$strata" demo layer4 >/dev/null 2>&1
[ $? -eq 2 ] || fail "demo layer4 on one rank was not refused with status 2"
bounded "$strata" demo layer5 >/dev/null 2>&1
[ $? -eq 2 ] || fail "an unknown demo scene was not refused with status 2"

[ $failures -eq 0 ] && echo "test_demo: ok"
exit $((failures > 0))
