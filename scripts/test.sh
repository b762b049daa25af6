#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The whole suite: the format check, the release build, then ASan+UBSan build, then the
# engine's tests under TSan. The release pass also builds the libFuzzer harnesses with clang (in
# build-fuzz) and runs each for a few seconds (ctest fuzz_*; tests/fuzz/README.md), overlapped
# with the other tests.
# Prints each suite's time, the skipped tests, and one closing line "N passed, N failed" over all
# three (a skipped test is neither).
#
# ctest runs one more test than there are cores at a time: most tests wait on sockets, pipes or
# child processes part of the time. CMakeLists.txt keeps apart what must not share the host
# (RESOURCE_LOCK, RUN_SERIAL, PROCESSORS); STRATA_CTEST_JOBS overrides the count.
set -uo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
ctest_jobs=${STRATA_CTEST_JOBS:-$((jobs + 1))}
passed=0; failed=0; skipped=0
run_suite() { # name builddir cmake-args ctest-args
  local name=$1 dir=$2 cmake_args=$3 ctest_args=$4 started=$SECONDS
  echo "=== $name ==="
  cmake -S . -B "$dir" $cmake_args >/dev/null || { failed=$((failed + 1)); return; }
  cmake --build "$dir" -j"$jobs" >/dev/null 2>"$dir.build.log" || { cat "$dir.build.log"; failed=$((failed + 1)); return; }
  local log="$dir/ctest.log"
  (cd "$dir" && ctest --output-on-failure -j"$ctest_jobs" $ctest_args) 2>&1 | tee "$log"
  local total fail skip
  total=$(sed -n 's/.*tests failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
  fail=$(sed -n 's/.* \([0-9]*\) tests failed out of.*/\1/p' "$log" | tail -1)
  skip=$(grep -c '(Skipped)$' "$log")
  total=${total:-0}; fail=${fail:-0}
  [ "$total" -eq 0 ] && { echo "$name: no tests ran"; failed=$((failed + 1)); return; }
  passed=$((passed + total - fail - skip)); failed=$((failed + fail)); skipped=$((skipped + skip))
  echo "$name: $((SECONDS - started)) s (build and tests)"
}
# The Python side runs in the suite's venv (torch 2.13, numpy, mypy from PyPI): scripts/venv.sh
scripts/venv.sh build-venv || { echo "the suite's venv could not be made"; exit 1; }
export STRATA_PYTHON=$PWD/build-venv/bin/python
echo "=== format ==="
if make --no-print-directory format-check; then passed=$((passed + 1)); else failed=$((failed + 1)); fi
run_suite release build "-DCMAKE_BUILD_TYPE=Release -DSTRATA_WERROR=ON -DSTRATA_BUILD_TESTS=ON -DPython3_EXECUTABLE=$STRATA_PYTHON" ""
export STRATA_TEST_QUICK=1 # sanitizer builds: the large cases for f32 sum only (same code paths)
run_suite asan-ubsan build-asan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_WERROR=ON -DSTRATA_BUILD_TESTS=ON -DSTRATA_SANITIZE=address,undefined" "-E _sh$"
run_suite tsan build-tsan "-DCMAKE_BUILD_TYPE=Debug -DSTRATA_WERROR=ON -DSTRATA_BUILD_TESTS=ON -DSTRATA_SANITIZE=thread" "-R engine|comm_fault|comm_elastic|comm_liveness|comm_lifecycle|net_"
[ "$skipped" -eq 0 ] || echo "$skipped skipped (see 'The following tests did not run' above)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
