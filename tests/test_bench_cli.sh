#!/usr/bin/env bash
# test_bench_cli.sh BUILD_DIR — `strata bench` end to end: bad usage exits 2 with a message;
# every collective runs at 2 and 3 ranks under `strata launch` with every #wrong 0 and the
# nccl-tests table shape; -J writes valid JSON; the same program runs unchanged under mpirun and
# torchrun. Every run has a bounded timeout; nothing leaves loopback.
set -uo pipefail

build=${1:?usage: test_bench_cli.sh BUILD_DIR}
strata=$build/strata
py=/usr/bin/python3
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
expect_usage "no GPUs" allreduce -g 2
expect_usage "one thread" allreduce -t 4
expect_usage "want 0 (rank 0)" allreduce -a 7
expect_usage "integer >= 1" allreduce -n 0
expect_usage "unknown option" allreduce --frobnicate
expect_usage "missing value" allreduce -b
expect_usage "never reaches" allreduce -f 1 -i 0
expect_usage "one collective" allreduce broadcast
"$strata" bench --help >"$tmp/help" 2>&1 || fail "strata bench --help: non-zero exit"
grep -q -- "--minbytes" "$tmp/help" || fail "strata bench --help does not describe -b"

# ---- table checks ----
# check_table FILE NAME ROWS: the nccl-tests shape, ROWS rows, every checked #wrong 0.
check_table() {
  local file=$1 name=$2 rows=$3
  grep -q '^#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong$' "$file" ||
    fail "$name: no nccl-tests column header"
  grep -q '^#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)' "$file" ||
    fail "$name: no units line"
  grep -q '^#  Rank  0 Group  0 Pid .* on .* device  0 \[cpu\]' "$file" || fail "$name: no rank line"
  grep -q '^# Out of bounds values : 0 OK$' "$file" || fail "$name: no '# Out of bounds values : 0 OK'"
  grep -Eq '^# Avg bus bandwidth    : [0-9.e+-]+ ?$' "$file" || fail "$name: no Avg bus bandwidth line"
  local got
  got=$(awk '!/^#/ && NF == 13' "$file" | wc -l)
  [ "$got" = "$rows" ] || fail "$name: $got rows, want $rows"
  local bad
  bad=$(awk '!/^#/ && NF == 13 && ($9 != "0" || ($13 != "0" && $13 != "N/A"))' "$file")
  [ -z "$bad" ] || fail "$name: rows with #wrong != 0: $bad"
}

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

# ---- -J: valid JSON with every row ----
timeout 120 "$strata" launch -n 2 -- "$strata" bench allgather -b 8 -e 64K -f 4 -n 2 -w 1 \
  -J "$tmp/result.json" >"$tmp/json.out" 2>"$tmp/json.err" || fail "-J run: $(tail -3 "$tmp/json.err")"
if "$py" -m json.tool "$tmp/result.json" >/dev/null 2>"$tmp/json.tool.err"; then
  "$py" - "$tmp/result.json" <<'EOF' || fail "-J: unexpected content"
import json, sys
d = json.load(open(sys.argv[1]))
assert d["collective"] == "allgather" and d["nranks"] == 2, d
rows = d["results"]
assert [r["size_bytes"] for r in rows] == [8, 32, 128, 512, 2048, 8192, 32768], rows
assert all(r["out_of_place"]["wrong"] == 0 and r["in_place"]["wrong"] == 0 for r in rows)
assert all(r["out_of_place"]["time_us"] > 0 for r in rows)
assert d["out_of_bounds"] == 0
EOF
else
  fail "-J wrote invalid JSON: $(cat "$tmp/json.tool.err")"
fi

# ---- the same program under mpirun ----
if command -v mpirun >/dev/null; then
  status=0
  timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$strata" bench allreduce \
    -b 8 -e 64K -f 4 -n 2 -w 1 >"$tmp/mpi.out" 2>"$tmp/mpi.err" || status=$?
  if [ "$status" = 0 ]; then check_table "$tmp/mpi.out" mpirun 7
  else fail "mpirun: exit $status: $(tail -3 "$tmp/mpi.err")"; fi
else
  echo "skip: mpirun not installed"
fi

# ---- and under torchrun (torch 1.13: --no_python, --master_port; our store is MASTER_PORT+1).
# --redirects 2 --tee 2: torch 1.13's Std.from_str("0") returns None under Python 3.11 (IntFlag
# no longer iterates the zero member), so the default "0" crashes the agent; 2 (stderr) parses
# and leaves stdout, the table, untouched. ----
if "$py" -c 'import torch.distributed.run' 2>/dev/null; then
  port=$("$py" -c 'import socket
for _ in range(50):
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError:
        pass
    finally:
        s.close(); t.close()')
  status=0
  timeout 120 "$py" -m torch.distributed.run --nproc_per_node 2 --master_port "$port" \
    --redirects 2 --tee 2 --no_python \
    "$strata" bench allreduce -b 8 -e 64K -f 4 -n 2 -w 1 >"$tmp/torch.out" 2>"$tmp/torch.err" ||
    status=$?
  if [ "$status" = 0 ]; then check_table "$tmp/torch.out" torchrun 7
  else fail "torchrun: exit $status: $(tail -3 "$tmp/torch.err")"; fi
else
  echo "skip: $py has no torch"
fi

if [ "$failures" != 0 ]; then
  echo "test_bench_cli: $failures failure(s)"
  exit 1
fi
echo "test_bench_cli: all passed"
