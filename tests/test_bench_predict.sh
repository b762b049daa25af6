#!/usr/bin/env bash
# test_bench_predict.sh BUILD_DIR — `strata bench --predict` (issue 3, point 8): the model's
# busbw is printed beside the measured one, from links calibrated inside the run, and it tracks
# the measurement. For the largest size of `strata launch -n 2 -- strata bench allreduce -b 4M
# -e 32M -f 2 --predict` (shared memory, then STRATA_SHM=0 for TCP) the prediction must be within
# TOLERANCE (default 50%: CI hosts are noisy; on a quiet host we see ~10-25%, docs/bench.md) of the
# out-of-place measurement. A loaded host gets one rerun per transport; a host whose load
# average exceeds twice its cores skips the accuracy check (still checks the column). Runs are time-bounded and
# stay on loopback.
set -uo pipefail

build=${1:?usage: test_bench_predict.sh BUILD_DIR}
strata=$build/strata
tolerance=${STRATA_PREDICT_TOLERANCE:-0.5}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
skipped=""

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

[ -x "$strata" ] || { echo "FAIL: $strata not built"; exit 1; }

# run_once SHM OUT: one bench run; prints "measured predicted" of the largest size.
run_once() {
  local shm=$1 out=$2
  if ! STRATA_SHM=$shm timeout 120 "$strata" launch -n 2 -- "$strata" bench allreduce -b 4M -e 32M \
      -f 2 -n 10 -w 3 --predict >"$out" 2>"$out.err"; then
    echo "bench failed: $(tail -3 "$out.err")"
    return 2
  fi
  grep -q '^# Model (--predict): .*alpha .* us, link .* GB/s' "$out" || {
    echo "no calibration line"
    return 2
  }
  # every row has a numeric model column; the last row is 32 MiB
  awk '!/^#/ && NF { if ($NF !~ /^[0-9.]+$/) bad = 1; last = $0 }
       END { if (bad || last == "") exit 1; n = split(last, f, " "); print f[8], f[n] }' "$out" || {
    echo "rows without a model busbw"
    return 2
  }
}

# within MEASURED PREDICTED: 0 if |predicted/measured - 1| <= tolerance
within() {
  awk -v m="$1" -v p="$2" -v t="$tolerance" 'BEGIN { exit !(m > 0 && p > 0 && (p / m - 1) <= t && (m / p - 1) <= t) }'
}

for shm in 1 0; do
  name=$([ "$shm" = 1 ] && echo shm || echo tcp)
  ok=0
  for attempt in 1 2; do
    result=$(run_once "$shm" "$tmp/$name.$attempt") || {
      fail "$name: $result"
      cat "$tmp/$name.$attempt" "$tmp/$name.$attempt.err" 2>/dev/null | tail -12
      ok=2
      break
    }
    read -r measured predicted <<<"$result"
    echo "$name attempt $attempt: 32 MiB allreduce busbw measured $measured GB/s, predicted $predicted GB/s (load $(cut -d' ' -f1 /proc/loadavg))"
    if within "$measured" "$predicted"; then
      ok=1
      break
    fi
  done
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ "$ok" = 0 ] && awk -v l="$load" -v c="$(nproc)" 'BEGIN { exit !(l > 2 * c) }'; then
    # other processes hold the cores: neither figure means anything (docs/bench.md)
    echo "SKIP accuracy ($name): host load $load on $(nproc) cores; the model column is present"
    skipped="$skipped $name"
  elif [ "$ok" = 0 ]; then
    fail "$name: predicted $predicted GB/s vs measured $measured GB/s: off by more than ${tolerance} twice"
    grep -v '^#  Rank' "$tmp/$name.2" | tail -10
  fi
done

[ "$failures" = 0 ] && echo "ok: bench --predict within ${tolerance} of the measurement${skipped:+ (accuracy skipped on a loaded host:$skipped)}"
exit $((failures > 0))
