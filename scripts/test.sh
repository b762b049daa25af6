#!/usr/bin/env bash
# The whole suite: release build, then ASan+UBSan build, then the engine's tests under TSan.
# Prints one closing line "N passed, N failed" over all three.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
passed=0; failed=0
run_suite() { # name builddir cmake-args ctest-args
  local name=$1 dir=$2 cmake_args=$3 ctest_args=$4
  echo "=== $name ==="
  cmake -S . -B "$dir" $cmake_args >/dev/null || { failed=$((failed + 1)); return; }
  cmake --build "$dir" -j"$jobs" >/dev/null 2>"$dir.build.log" || { cat "$dir.build.log"; failed=$((failed + 1)); return; }
  local log="$dir/ctest.log"
  (cd "$dir" && ctest --output-on-failure $ctest_args) 2>&1 | tee "$log"
  local total fail
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  fail=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  total=${total:-0}; fail=${fail:-0}
  [ "$total" -eq 0 ] && { echo "$name: no tests ran"; failed=$((failed + 1)); return; }
  passed=$((passed + total - fail)); failed=$((failed + fail))
}
run_suite release build "-DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON -DSTRATA_BUILD_TESTS=ON" ""
export STRATA_TEST_QUICK=1 # sanitizer builds: the large cases for f32 sum only (same code paths)
run_suite asan-ubsan build-asan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_WERROR=ON -DSTRATA_BUILD_TESTS=ON -DSTRATA_SANITIZE=address,undefined" "-E _sh$"
run_suite tsan build-tsan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_WERROR=ON -DSTRATA_BUILD_TESTS=ON -DSTRATA_SANITIZE=thread" "-R engine|comm_fault|net_"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
