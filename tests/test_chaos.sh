#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_chaos.sh BUILD_DIR — the elastic communicators under churn, briefly (issue 28): the chaos
# harness (bench/chaos/chaos.py) over shared memory, then over TCP, 4 ranks each, kills, joins and
# a frozen rank at a fixed seed. Fails on a wrong result, a hang (a call longer than
# STRATA_TIMEOUT + 5 s, or a worker that does not stop), a kill or freeze the survivors never
# recovered from, a thawed rank that was not left out, or anything a dead communicator left
# behind (fds, threads, segments). Each run's report is printed; the logs are kept on failure.
# CHAOS_TEST_S sets the seconds of churn per transport.
set -u
build=${1:?usage: test_chaos.sh BUILD_DIR}
source_dir=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
python=${STRATA_PYTHON:-/usr/bin/python3}
seconds=${CHAOS_TEST_S:-12}
[ -x "$build/strata" ] || { echo "test_chaos: $build/strata is missing: skipped"; exit 77; }
[ -e "$build/libstrata.so" ] || { echo "test_chaos: $build/libstrata.so is missing: skipped"; exit 77; }
[ -x "$python" ] || { echo "test_chaos: $python is missing: skipped"; exit 77; }
if [ ! -x "$build/strata-chaos-worker" ] && ! command -v cc >/dev/null; then
  echo "test_chaos: no strata-chaos-worker and no C compiler to build one: skipped"
  exit 77
fi
work=$(mktemp -d)
failures=0
for transport in shm tcp; do
  # the driver bounds itself; timeout is the guard should the driver itself wedge
  timeout -k 5 $((seconds + 90)) "$python" "$source_dir/bench/chaos/chaos.py" --build "$build" \
    --transport "$transport" --ranks 4 --duration "$seconds" --seed 7 --quiet \
    --out "$work/$transport"
  rc=$?
  [ $rc -eq 77 ] && { rm -rf "$work"; exit 77; }
  if [ $rc -ne 0 ]; then
    echo "FAIL: chaos over $transport exited $rc (logs in $work/$transport)"
    failures=$((failures + 1))
  fi
done
[ $failures -eq 0 ] && rm -rf "$work"
exit $((failures != 0))
