#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_demo.sh BUILD_DIR — `strata demo layer4` (make demo's layer-4 scene) on 2 local ranks: the
# DiLoCo outer step matches the one recomputed locally and both weight versions reach the
# subscriber bit for bit (the command checks; this test reads its verdict and exit status); one
# rank, or an unknown scene, is refused with status 2. Piped, each line leaves as soon as it is
# whole: under strace, the demo's first write to its stdout is its first line alone (a block
# buffer would hold every line to the end; checked where strace can trace).
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

if command -v strace >/dev/null && strace -qq -e trace=none true 2>/dev/null; then
  trace=$(mktemp)
  bounded strace -f -qq -e trace=write -e signal=none -o "$trace" \
    "$strata" launch -n 2 -- "$strata" demo layer4 | cat >/dev/null
  first_line="strata demo layer4: 2 ranks on this host"
  first=$(grep -m1 "write(1, \"strata demo layer4" "$trace")
  echo "$first" | grep -q "= $((${#first_line} + 1))\$" ||
    fail "piped, the first write to stdout is not the first line alone: ${first:-none}"
  rm -f "$trace"
else
  echo "strace cannot trace here: line-at-a-time output when piped not checked"
fi

[ $failures -eq 0 ] && echo "test_demo: ok"
exit $((failures > 0))
