#!/usr/bin/env bash
# test_bench_predict.sh BUILD_DIR — `strata bench --predict` (issue 3, point 8): the model's
# busbw is printed beside the measured one, from links calibrated inside the run, and it tracks
# the measurement across the cache boundary, not only at one size.
#
# `strata launch -n 2 -- strata bench allreduce -b 1M -e 64M -f 4 --predict`, over shared memory
# and then TCP (STRATA_SHM=0). Every row (1, 4, 16, 64 MiB: working sets from L2-sized to
# DRAM-sized) must have a numeric model column, and the MEDIAN over the rows of
# predicted/measured must lie within a factor of 1 + TOLERANCE (default 0.5: [0.67, 1.5]) of 1,
# with no single row off by more than a factor of 3. On a quiet host the rows agree within ~25%
# (docs/model.md); the band is wider because CI hosts are shared and one descheduled rank halves
# a row's measurement.
#
# It can fail: a model that ignored the caches (one rate for every size) is off by 2-3x at
# 1-4 MiB on this kind of host, and the negative control below re-scores the very same rows
# with the prediction scaled by 2.5 and requires the band to reject them.
#
# The first run's printed calibration is also fed to build/strata-repredict, which must give the
# printed prediction back (within the 2 decimals the curves are printed with): the header holds
# every figure the model used, so saved runs can be re-scored (bench/predict.sh --rescore).
#
# A loaded host gets one rerun per transport; a host whose load average exceeds twice its cores
# skips the accuracy check (still checks the column). Runs are time-bounded, stay on loopback.
set -uo pipefail

build=${1:?usage: test_bench_predict.sh BUILD_DIR}
strata=$build/strata
tolerance=${STRATA_PREDICT_TOLERANCE:-0.5}
row_factor=3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
skipped=""

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

[ -x "$strata" ] || { echo "FAIL: $strata not built"; exit 1; }

# run_once SHM OUT: one bench run; prints one "size measured predicted" line per row.
run_once() {
  local shm=$1 out=$2
  if ! STRATA_SHM=$shm timeout 120 "$strata" launch -n 2 -- "$strata" bench allreduce -b 1M -e 64M \
      -f 4 -n 5 -w 2 --predict >"$out" 2>"$out.err"; then
    echo "bench failed: $(tail -3 "$out.err")"
    return 2
  fi
  grep -q '^# Model (--predict): .*alpha .* us, link .* GB/s' "$out" || {
    echo "no calibration line"
    return 2
  }
  awk '!/^#/ && NF { if ($NF !~ /^[0-9.]+$/) bad = 1; rows++; print $1, $8, $NF }
       END { if (bad || rows != 4) exit 1 }' "$out" || {
    echo "rows without a model busbw (or not 4 rows)"
    return 2
  }
}

# judge SCALE < rows: 0 if the median ratio is within the band and no row is off by more than
# row_factor, with every prediction multiplied by SCALE. Prints the ratios.
judge() {
  awk -v t="$tolerance" -v f="$row_factor" -v k="$1" '
    { m = $2; p = $3 * k; if (m <= 0 || p <= 0) { bad = 1; next }
      r[n++] = p / m; if (p / m > f || m / p > f) bad = 1 }
    END {
      if (n == 0) exit 1
      for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (r[j] < r[i]) { x = r[i]; r[i] = r[j]; r[j] = x }
      med = n % 2 ? r[(n - 1) / 2] : (r[n / 2 - 1] + r[n / 2]) / 2
      s = ""; for (i = 0; i < n; i++) s = s sprintf(" %.2f", r[i])
      printf "ratios (sorted)%s, median %.2f\n", s, med
      exit !(!bad && med <= 1 + t && 1 / med <= 1 + t)
    }'
}

for shm in 1 0; do
  name=$([ "$shm" = 1 ] && echo shm || echo tcp)
  ok=0
  for attempt in 1 2; do
    rows=$(run_once "$shm" "$tmp/$name.$attempt") || {
      fail "$name: $rows"
      cat "$tmp/$name.$attempt" "$tmp/$name.$attempt.err" 2>/dev/null | tail -12
      ok=2
      break
    }
    # the printed calibration is the whole model input: this build's model re-run on the printed
    # curves (bench/repredict.c) gives the printed column back (curves print 2 decimals: 3%)
    if [ "$attempt" = 1 ] && ! "$build/strata-repredict" "$tmp/$name.1" allreduce >"$tmp/$name.re" 2>&1; then
      fail "$name: strata-repredict: $(tail -1 "$tmp/$name.re")"
    elif [ "$attempt" = 1 ] && ! awk '{ r = $4 / $3; if (r < 0.97 || r > 1.03 || NF != 4) bad = 1; n++ }
                                     END { exit bad || n != 4 }' "$tmp/$name.re"; then
      fail "$name: the printed curves do not give the printed prediction back:"
      cat "$tmp/$name.re"
    fi
    verdict=$(judge 1 <<<"$rows")
    good=$?
    echo "$name attempt $attempt (load $(cut -d' ' -f1 /proc/loadavg)): predicted/measured $verdict"
    if [ "$good" = 0 ]; then
      # negative control: the same rows with a prediction 2.5x off must be rejected
      if judge 2.5 <<<"$rows" >/dev/null; then
        fail "$name: a prediction scaled by 2.5 still passed the band: the check cannot fail"
      fi
      ok=1
      break
    fi
  done
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ "$ok" = 0 ] && awk -v l="$load" -v c="$(nproc)" 'BEGIN { exit !(l > 2 * c) }'; then
    # other processes hold the cores: neither figure means anything (docs/model.md)
    echo "SKIP accuracy ($name): host load $load on $(nproc) cores; the model column is present"
    skipped="$skipped $name"
  elif [ "$ok" = 0 ]; then
    fail "$name: median predicted/measured outside [1/(1+${tolerance}), 1+${tolerance}] (or a row off by >${row_factor}x) twice"
    grep -v '^#  Rank' "$tmp/$name.2" | tail -8
  fi
done

# More ranks than cores over TCP (4 ranks where the host has fewer cores): the simulated time is
# not continuous in the printed figures there (which rank a shared core serves first can flip
# with the last digit), so the round trip through strata-repredict must hold as well.
if STRATA_SHM=0 timeout 120 "$strata" launch -n 4 -- "$strata" bench broadcast -b 1M -e 4M -f 4 \
    -n 5 -w 2 --predict >"$tmp/chain" 2>"$tmp/chain.err"; then
  if ! "$build/strata-repredict" "$tmp/chain" broadcast >"$tmp/chain.re" 2>&1; then
    fail "4-rank tcp broadcast: strata-repredict: $(tail -1 "$tmp/chain.re")"
  elif ! awk '{ r = $4 / $3; if (r < 0.97 || r > 1.03 || NF != 4) bad = 1; n++ }
              END { exit bad || n != 2 }' "$tmp/chain.re"; then
    fail "4-rank tcp broadcast: the printed header does not give the printed prediction back:"
    cat "$tmp/chain.re"
  fi
else
  fail "4-rank tcp broadcast --predict failed: $(tail -3 "$tmp/chain.err")"
fi

# A malformed curve is refused by strata-repredict with status 2, not read as zeros.
sed '/^# Model curves/s/ link \([0-9.]*\) reduce/ link x reduce/' "$tmp/tcp.1" >"$tmp/tcp.bad"
"$build/strata-repredict" "$tmp/tcp.bad" allreduce >/dev/null 2>&1
rc=$?
[ "$rc" = 2 ] || fail "strata-repredict read a malformed curve (status $rc, want 2)"

# bench/predict.sh --rescore with two sweep directories (here the same two runs twice) scores each
# and pools them: 8 cells a sweep (allreduce, 2 ranks, shm and tcp, 4 sizes), the same count
# inside in both, and every cell listed outside is outside in both or neither.
if [ -f "$tmp/shm.1" ] && [ -f "$tmp/tcp.1" ]; then
  for d in a b; do
    mkdir -p "$tmp/sweep-$d"
    cp "$tmp/shm.1" "$tmp/sweep-$d/allreduce-2-shm-1.txt"
    cp "$tmp/tcp.1" "$tmp/sweep-$d/allreduce-2-tcp-1.txt"
  done
  BUILD=$build bash "$(dirname "$0")/../bench/predict.sh" --rescore "$tmp/sweep-a" "$tmp/sweep-b" \
    >"$tmp/pooled" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    fail "predict.sh --rescore of two sweeps: status $rc: $(tail -2 "$tmp/pooled")"
  elif ! grep -Eq '^2 ranks: inside by median per sweep ([0-8])/8, \1/8; [0-9]+ of 16 in all$' "$tmp/pooled" ||
    sed -n '/^pooled/,$p' "$tmp/pooled" | grep -E '^\| allreduce, 2, ' | grep -vq '| 2 of 2 |'; then
    fail "predict.sh --rescore of two equal sweeps does not pool them as equal:"
    sed -n '/pooled/,$p' "$tmp/pooled"
  else
    # every run pooled: two equal runs of a cell have that run's ratio as their median
    per=$(sed -n 's|^2 ranks: inside by median per sweep \([0-8]\)/8, .*|\1|p' "$tmp/pooled")
    grep -Eq "^2 ranks: inside by the median of every run pooled: $per of 8( \(outside: .*\))?\$" \
      "$tmp/pooled" || fail "predict.sh --rescore: the runs pooled do not give the sweeps' count ($per of 8):
$(grep 'every run pooled' "$tmp/pooled")"
  fi
  BUILD=$build bash "$(dirname "$0")/../bench/predict.sh" --rescore "$tmp/sweep-a" "$tmp/none" \
    >/dev/null 2>&1
  rc=$?
  [ "$rc" = 2 ] || fail "predict.sh --rescore with a missing directory: status $rc, want 2"
fi

[ "$failures" = 0 ] && echo "ok: bench --predict within ${tolerance} of the measurement (median of 1-64 MiB)${skipped:+ (accuracy skipped on a loaded host:$skipped)}"
exit $((failures > 0))
