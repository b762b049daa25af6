#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_bench_flags.sh BUILD_DIR — every option of nccl-tests 2.19.6's *_perf is accepted by
# `strata bench` and honoured where it means something on CPU ranks: one 2-rank run with all of
# them (-t -g -b -e -f -n -m -w -N -p -I -K -c -o -d -r -z -y -T -G -C -a -R -x -D -V -J -S -M -u)
# shows each in the header, the rows and the JSON; -i steps by bytes; -T makes a frozen peer fail
# the run within seconds (the default would wait STRATA_TIMEOUT, 30 s); NCCL_TESTS_MIN_BW fails
# a run below it; -K without -I is disabled with nccl-tests' message; -D above 0, -V 0 and -x 3
# are refused; the alltoallv_perf and hypercube_perf links run checked. A few seconds.
set -uo pipefail
build=${1:?usage: test_bench_flags.sh BUILD_DIR}
strata=$build/strata
py=/usr/bin/python3
[ -x "$py" ] || py=python3
[ -x "$strata" ] || { echo "test_bench_flags: $strata is missing"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bounded() { timeout -k 2 40 "$@"; }
# one rank, no launcher (as nccl-tests without MPI), bounded
solo() {
  timeout -k 2 40 env -u STRATA_RANK -u STRATA_WORLD_SIZE -u STRATA_ADDR -u RANK -u WORLD_SIZE -u MASTER_ADDR \
    -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u SLURM_PROCID -u SLURM_NTASKS "$@"
}

# ---- 1. every flag at once, 2 ranks ----
all=(-t 1 -g 1 -b 1K -e 4K -f 2 -n 4 -m 2 -w 3 -N 2 -p 1 -I 1 -K 1 -c 3 -o max -d int32 -r 0 -z 3
  -y 0 -T 30 -G 0 -C 1 -a 3 -R 1 -x 0 -D 0 -V 16 -J "$tmp/all.json" -S 1 -M 1 -u 1)
bounded "$strata" launch -n 2 -- "$build/all_reduce_perf" "${all[@]}" >"$tmp/all.out" \
  2>"$tmp/all.err" || fail "every flag: exit $?: $(tail -3 "$tmp/all.err")"
out=$tmp/all.out
grep -qx '# nccl-tests version 2.19.6 nccl-headers=0 nccl-library=0' "$out" || fail "version line"
grep -qx '# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 3 iters: 4 agg iters: 2 validation: 3 graph: 0 unalign: 1' "$out" ||
  fail "-w -n -m -c -u not in the nThread line: $(grep nThread "$out")"
grep -q '^# Blocking Enabled: wait and barrier after each outer iteration (-n); time excludes barrier $' "$out" ||
  fail "-z 3: no blocking line"
grep -q '^# Per-Iteration Report: .*; summary skips first 1 iterations $' "$out" || fail "-I -K: no report line"
grep -q '^#       size .*  cputime   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%  cputime .*  timestamp$' "$out" ||
  fail "-C -I -S: column header"
# rows: 3 sizes x 2 cycles (-N 2), each ending in a timestamp (-S), int32 max, root -1
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +int32 +max +-1 .* [0-9]{4}-[0-9]{2}-[0-9]{2} [0-9:]{8}$' "$out")
[ "$rows" = 6 ] || fail "-N 2 -S: $rows rows, want 6: $(grep -v '^#' "$out")"
awk '!/^#/ && NF == 23 && ($9 != "0" || $17 != "0") { bad = 1 } END { exit bad }' "$out" ||
  fail "#wrong not 0 (or -I columns missing)"
grep -qE '^# Host memory usage    : Initialization [0-9.]+ [KMG]?B \| User-Allocated [0-9.]+ [KMG]?B \| Collective [0-9.]+ [KMG]?B \| Total  [0-9.]+ [KMG]?B$' "$out" ||
  fail "-M: no memory line: $(grep -i memory "$out")"
grep -q 'strata bench: -x 0: strata ranks run no CTAs' "$tmp/all.err" || fail "-x: no note that it is ignored"
"$py" - "$tmp/all.json" <<'EOF' || fail "-J (with -I -C -N): unexpected JSON"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["version"] == 3, d["version"]
c = d["config"]
assert c["warmup_iters"] == 3 and c["iterations"] == 4 and c["aggregated_iterations"] == 2, c
assert c["validation"] == 3 and c["blocking_collectives"] == "true", c
assert c["per_iter_timing"] == "true" and c["per_iter_skip"] == 1 and c["parallel_init"] == "true", c
rows = d["results"]
assert [r["size"] for r in rows] == [1024, 2048, 4096] * 2, [r["size"] for r in rows]
for r in rows:
    assert list(r)[:6] == ["size", "count", "type", "redop", "root", "out_of_place"], list(r)
    for place in ("out_of_place", "in_place"):
        assert set(r[place]) == {"cpu_time", "alg_bw", "bus_bw", "nwrong"}, r[place]
        assert r[place]["nwrong"] == 0, r[place]
        it = r[place + "_per_iter"]
        assert it["skipped_iterations"] == 1 and len(it["times_us"]) == 4, it
        assert len(it["per_process_max_times_us"]) == 2, it
        assert it["min_us"] <= it["p50_us"] <= it["max_us"], it
        assert max(it["times_us"][1:]) == it["max_us"], it
EOF

# ---- 2. -i steps by bytes; -K without -I is disabled, as nccl-tests does ----
solo "$strata" bench allgather -b 1000 -e 3000 -i 1000 -n 2 -K 1 >"$tmp/steps.out" \
  2>"$tmp/steps.err" || fail "-i: exit $?"
[ "$(grep -cE '^ +[123]000 ' "$tmp/steps.out")" = 3 ] || fail "-i 1000: not 3 rows"
grep -q 'per-iteration skip (-K) requires per-iteration timing (-I 1). Disabling.' "$tmp/steps.err" ||
  fail "-K without -I: no message"

# ---- 3. NCCL_TESTS_MIN_BW: a run below 90% of it fails ----
NCCL_TESTS_MIN_BW=1000000 solo "$strata" bench allreduce -b 8 -e 8 -n 1 >"$tmp/minbw.out" 2>&1
[ $? = 1 ] || fail "NCCL_TESTS_MIN_BW above the bandwidth: not exit 1"
grep -qE '^# Avg bus bandwidth    : [0-9.e+-]+ FAILED$' "$tmp/minbw.out" || fail "NCCL_TESTS_MIN_BW: no FAILED"

# ---- 4. refused: what CPU ranks cannot do ----
for bad in "-D 1" "-V 0" "-x 3" "-G 1"; do
  # shellcheck disable=SC2086
  solo "$strata" bench allreduce $bad >/dev/null 2>&1
  [ $? = 2 ] || fail "'$bad': not refused with status 2"
done

# ---- 5. -T: a frozen peer fails the run within seconds, not STRATA_TIMEOUT's 30 ----
start=$(date +%s)
bounded "$strata" launch -n 2 -- sh -c 'if [ "$STRATA_RANK" = 1 ]; then (sleep 1; kill -STOP $$) & fi
  exec "$0" bench allreduce -b 8 -e 8 -n 100 -N 0 -T 2' "$strata" >/dev/null 2>"$tmp/timeout.err"
status=$?
took=$(($(date +%s) - start))
[ $status != 0 ] || fail "-T 2 with a frozen peer: exit 0"
[ $took -lt 20 ] || fail "-T 2 with a frozen peer: the run took ${took} s"

# ---- 6. alltoallv_perf and hypercube_perf, checked ----
for perf in alltoallv_perf hypercube_perf; do
  bounded "$strata" launch -n 2 -- "$build/$perf" -b 1K -e 16K -f 4 -n 2 >"$tmp/$perf.out" \
    2>"$tmp/$perf.err" || fail "$perf: exit $?: $(tail -2 "$tmp/$perf.err")"
  grep -qx "# Collective test starting: $perf" "$tmp/$perf.out" || fail "$perf: no starting line"
  [ "$(grep -cE '^ +[0-9]+ +[0-9]+ +float ' "$tmp/$perf.out")" = 3 ] || fail "$perf: not 3 rows"
  grep -q '^# Out of bounds values : 0 OK$' "$tmp/$perf.out" || fail "$perf: wrong elements"
done

[ $failures = 0 ] && echo "test_bench_flags: ok"
exit $((failures > 0))
