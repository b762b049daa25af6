#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_bench_cli.sh BUILD_DIR — `strata bench` end to end: bad usage exits 2 with a message;
# every collective runs at 2 and 3 ranks under `strata launch` with every #wrong 0 (in-place
# sendrecv included) and the nccl-tests table shape; run through the all_reduce_perf link it is
# nccl-tests' all_reduce_perf (its start and end lines); -J writes nccl-tests' JSON keys and never
# overwrites; a size that cannot fit in memory and an unwritable -J path are refused before the
# run (under mpirun and torchrun: test_bench_mpirun.sh, test_bench_torchrun.sh). Every run has a
# bounded timeout; nothing leaves loopback.
set -uo pipefail

build=${1:?usage: test_bench_cli.sh BUILD_DIR}
strata=$build/strata
py=${STRATA_PYTHON:-/usr/bin/python3}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0

fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}

[ -x "$strata" ] || { echo "FAIL: $strata not built"; exit 1; }

# ---- bad usage: exit 2 and a message naming the problem, before any rank starts ----
expect_usage() {
  local want=$1
  shift
  local status=0
  timeout 20 "$strata" bench "$@" >"$tmp/out" 2>"$tmp/err" || status=$?
  if [ "$status" != 2 ]; then
    fail "strata bench $*: exit $status, want 2"
  elif ! grep -q -- "$want" "$tmp/err"; then
    fail "strata bench $*: message lacks '$want': $(cat "$tmp/err")"
  fi
}
expect_usage "which collective"
expect_usage "unknown collective" allgatherv
expect_usage "not a size" allreduce -b 12X
expect_usage "not a size" allreduce -e lots
expect_usage "larger than" allreduce -b 1M -e 8
expect_usage "unknown datatype" allreduce -d fp8
expect_usage "unknown op" allreduce -o xor
expect_usage "bitwise ops take integer types" allreduce -d float -o band
expect_usage "no GPUs" allreduce -g 2
expect_usage "one thread" allreduce -t 4
expect_usage "want 0 (rank 0)" allreduce -a 7
expect_usage "integer >= 1" allreduce -n 0
expect_usage "unknown option" allreduce --frobnicate
expect_usage "missing value" allreduce -b
expect_usage "never reaches" allreduce -f 1 -i 0
expect_usage "one collective" allreduce broadcast
expect_usage "number of checks" allreduce -c -1
expect_usage "want 0, 1, 2 or 3" allreduce -z 4
"$strata" bench --help >"$tmp/help" 2>&1 || fail "strata bench --help: non-zero exit"
grep -q -- "--minbytes" "$tmp/help" || fail "strata bench --help does not describe -b"
grep -q -- "strata bench kv" "$tmp/help" || fail "strata bench --help does not mention kv"

# ---- strata bench kv: KV transfer between two processes of this host, no launcher ----
expect_usage "usage: strata bench kv" kv --frobnicate
expect_usage "bad arguments" kv -b 4M -e 1M -t 2M
if timeout 60 "$strata" bench kv -B tcp -N -t 4M -b 1M -e 1M -n 1 -w 0 >"$tmp/kv.out" 2>"$tmp/kv.err"; then
  grep -Eq '^ +1048576 +4 +[0-9]+ +[0-9.]+ +ok$' "$tmp/kv.out" ||
    fail "strata bench kv: no checked row: $(cat "$tmp/kv.out")"
else
  fail "strata bench kv: $(tail -3 "$tmp/kv.err")"
fi

# ---- table checks ----
# check_table FILE NAME ROWS: the nccl-tests shape, ROWS rows, every checked #wrong 0.
. "$(dirname "$0")/helpers/bench_table.sh"

# run_bench NAME NRANKS ROWS ARGS...: strata launch -n NRANKS -- strata bench ARGS.
run_bench() {
  local name=$1 n=$2 rows=$3
  shift 3
  local status=0
  timeout 120 "$strata" launch -n "$n" -- "$strata" bench "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    status=$?
  if [ "$status" != 0 ]; then
    fail "$name: exit $status: $(tail -3 "$tmp/$name.err")"
    return
  fi
  check_table "$tmp/$name.out" "$name" "$rows"
}

# 8, 32, 128, 512, 2K, 8K, 32K: 7 sizes.
run_bench allreduce2 2 7 allreduce -b 8 -e 64K -f 4 -n 2 -w 1
for coll in allreduce reduce_scatter allgather broadcast reduce gather scatter alltoall sendrecv; do
  run_bench "${coll}3" 3 7 "$coll" -b 8 -e 64K -f 4 -n 2 -w 1 -r 2
done
# Types and ops beyond float sum, in-place and rooted variants, nccl-tests' names.
run_bench types2 2 20 all_reduce_perf -b 64 -e 128 -f 2 -n 1 -w 0 -d all
run_bench ops3 3 10 allreduce -b 96 -e 192 -f 2 -n 1 -w 0 -d int32 -o all
run_bench avg3 3 3 reduce_scatter -b 48 -e 3K -f 8 -n 1 -w 0 -d bfloat16 -o avg
run_bench minmax3 3 2 reduce -b 1K -e 2K -f 2 -n 1 -w 0 -d half -o min -r 1
run_bench bxor3 3 2 allreduce -b 96 -e 192 -f 2 -n 1 -w 0 -d int16 -o bxor
run_bench band3 3 2 reduce_scatter -b 96 -e 192 -f 2 -n 1 -w 0 -d uint16 -o band
run_bench bor2 2 2 reduce -b 64 -e 128 -f 2 -n 1 -w 0 -d int64 -o bor -r 1
run_bench steps2 2 3 broadcast -b 1000 -e 3000 -i 1000 -n 1 -w 0 -d uint8 -r 1 -z 1 -a 1
# -R 1: buffers from strata_mem_alloc, read by the peers directly (8 B .. 2 MiB: 10 rows).
run_bench registered2 2 10 allreduce -b 8 -e 4M -f 4 -n 2 -w 1 -R 1
run_bench registered3 3 10 allgather -b 8 -e 4M -f 4 -n 2 -w 1 -R 2 -d bfloat16

# No launcher at all: one rank, as nccl-tests without MPI (sizes 8 .. 64: 4 rows).
status=0
timeout 60 env -u STRATA_RANK -u STRATA_WORLD_SIZE -u STRATA_ADDR -u RANK -u WORLD_SIZE \
  -u MASTER_ADDR -u MASTER_PORT -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u SLURM_PROCID \
  -u SLURM_NTASKS "$strata" bench allreduce -b 8 -e 64 -f 2 -n 1 -w 0 >"$tmp/one.out" \
  2>"$tmp/one.err" || status=$?
if [ "$status" = 0 ]; then check_table "$tmp/one.out" one-rank 4
else fail "one rank without a launcher: exit $status: $(tail -3 "$tmp/one.err")"; fi

# -r beyond the ranks: a clear error, exit 2.
status=0
timeout 60 "$strata" launch -n 2 -- "$strata" bench broadcast -b 8 -e 8 -r 5 >/dev/null \
  2>"$tmp/root.err" || status=$?
[ "$status" != 0 ] || fail "-r 5 at 2 ranks: exit 0"
grep -q "no such rank" "$tmp/root.err" || fail "-r 5 at 2 ranks: no message: $(cat "$tmp/root.err")"

# In-place sendrecv has a defined result here, and it is checked: #wrong 0, never N/A.
awk '!/^#/ && NF == 13 && $13 != "0" { bad = 1 } END { exit bad }' "$tmp/sendrecv3.out" ||
  fail "in-place sendrecv not checked: $(grep -v '^#' "$tmp/sendrecv3.out")"

# ---- through the all_reduce_perf link: nccl-tests' all_reduce_perf, its start and end lines ----
perf=$build/all_reduce_perf
if [ -L "$perf" ] && [ "$(readlink "$perf")" = strata ]; then
  status=0
  timeout 120 "$strata" launch -n 2 -- "$perf" -b 8 -e 64K -f 4 -n 2 -w 1 >"$tmp/perf.out" \
    2>"$tmp/perf.err" || status=$?
  if [ "$status" = 0 ]; then
    check_table "$tmp/perf.out" all_reduce_perf 7
    grep -q '^# nccl-tests version 2.19.6 nccl-headers=0 nccl-library=0$' "$tmp/perf.out" ||
      fail "all_reduce_perf: no version line"
    grep -qx '# Collective test starting: all_reduce_perf' "$tmp/perf.out" ||
      fail "all_reduce_perf: no starting line"
    grep -q '^# nThread 1 nGpus 1 minBytes 8 maxBytes 65536 step: 4(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0$' \
      "$tmp/perf.out" || fail "all_reduce_perf: no nThread line"
    [ "$(tail -3 "$tmp/perf.out" | tr '\n' '|')" = "# Collective test concluded: all_reduce_perf|#||" ] ||
      fail "all_reduce_perf: does not end as nccl-tests: $(tail -3 "$tmp/perf.out")"
    awk '!/^#/ && NF == 13 && $4 != "sum" { bad = 1 } END { exit bad }' "$tmp/perf.out" ||
      fail "all_reduce_perf: not an allreduce"
  else
    fail "all_reduce_perf link: exit $status: $(tail -3 "$tmp/perf.err")"
  fi
else
  fail "$perf is not a link to strata (CMakeLists.txt makes it with strata_cli)"
fi

# ---- refused before the run, with a message and exit 2 ----
# expect_refused NAME WANT ARGS...: exit 2, WANT in the messages, no table row printed.
expect_refused() {
  local name=$1 want=$2 status=0
  shift 2
  timeout 60 "$strata" launch -n 2 -- "$strata" bench "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" ||
    status=$?
  [ "$status" = 2 ] || fail "$name: exit $status, want 2: $(tail -3 "$tmp/$name.err")"
  grep -q -- "$want" "$tmp/$name.err" || fail "$name: message lacks '$want': $(cat "$tmp/$name.err")"
  [ -z "$(awk '!/^#/ && NF >= 13' "$tmp/$name.out")" ] || fail "$name: rows ran before the refusal"
}
# Buffers that cannot fit: 3 buffers of -e bytes on each of 2 ranks is more than this host has
# available (8G, or more on a host with more memory). Before the refusal it was the OOM killer.
available_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
gib=$((available_kib / 1048576 + 1))
[ "$gib" -ge 8 ] || gib=8
expect_refused too-big "MemAvailable" allreduce -b 8 -e "${gib}G"
expect_refused bad-json "cannot create" allreduce -b 8 -e 64 -J "$tmp/no-such-dir/r.json"

# ---- -J: nccl-tests' JSON with every row; an existing file is kept (FILE.0 is written) ----
timeout 120 "$strata" launch -n 2 -- "$strata" bench allgather -b 8 -e 64K -f 4 -n 2 -w 1 \
  -J "$tmp/result.json" >"$tmp/json.out" 2>"$tmp/json.err" || fail "-J run: $(tail -3 "$tmp/json.err")"
grep -qx "# Writing JSON output to $tmp/result.json" "$tmp/json.out" || fail "-J: no 'Writing JSON' line"
if "$py" -m json.tool "$tmp/result.json" >/dev/null 2>"$tmp/json.tool.err"; then
  "$py" - "$tmp/result.json" <<'EOF' || fail "-J: unexpected content"
import json, sys
d = json.load(open(sys.argv[1]))
for key in ["version", "start_time", "args", "env", "nccl_version", "config", "results",
            "out_of_bounds", "average_bus_bandwidth", "errors", "end_time"]:
    assert key in d, key
c = d["config"]
assert c["nthreads"] == 1 and c["ngpus"] == 1 and c["minimum_bytes"] == 8, c
assert c["maximum_bytes"] == 65536 and c["step_factor"] == 4 and c["iterations"] == 2, c
assert c["warmup_iters"] == 1 and c["validation"] == 1 and len(c["devices"]) == 2, c
assert set(c["devices"][0]) == {"rank", "group", "pid", "hostname", "device", "device_hex",
                                "device_info"}, c["devices"][0]
rows = d["results"]
assert [r["size"] for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768], rows
for r in rows:
    assert r["type"] == "float" and r["redop"] == "none" and r["root"].strip() == "-1", r
    for place in ("out_of_place", "in_place"):
        assert set(r[place]) == {"time", "alg_bw", "bus_bw", "nwrong"}, r[place]
        assert r[place]["nwrong"] == 0 and r[place]["time"] > 0, r[place]
assert d["out_of_bounds"] == {"count": 0, "okay": "true"}, d["out_of_bounds"]
assert d["average_bus_bandwidth"]["bandwidth"] > 0, d["average_bus_bandwidth"]
assert not any(e.startswith("STRATA_SECRET=") and e != "STRATA_SECRET=(hidden)" for e in d["env"])
assert d["strata"]["collective"] == "allgather" and d["strata"]["nranks"] == 2, d["strata"]
EOF
else
  fail "-J wrote invalid JSON: $(cat "$tmp/json.tool.err")"
fi
cp "$tmp/result.json" "$tmp/first.json"
timeout 120 "$strata" launch -n 2 -- "$strata" bench allgather -b 8 -e 8 -n 1 -w 0 \
  -J "$tmp/result.json" >"$tmp/json2.out" 2>"$tmp/json2.err" || fail "-J again: $(tail -3 "$tmp/json2.err")"
cmp -s "$tmp/result.json" "$tmp/first.json" || fail "-J overwrote an existing file"
[ -s "$tmp/result.json.0" ] || fail "-J with an existing file: no $tmp/result.json.0"

if [ "$failures" != 0 ]; then
  echo "test_bench_cli: $failures failure(s)"
  exit 1
fi
echo "test_bench_cli: all passed"
