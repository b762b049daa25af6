#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/run.sh — strata against OpenMPI and Gloo, side by side, in one run (`make bench`).
#
# Allreduce, float32 sum, sizes 8 B .. 256 MiB, measured by the same method in all three
# (strata bench's, itself nccl-tests'; see docs/bench.md):
#   1. one host, shared memory, 2 and 4 ranks: strata (strata launch + strata bench -J),
#      OpenMPI (bench/mpi_allreduce.c, MPI_Allreduce, vader shared memory), Gloo
#      (bench/gloo_allreduce.py, torch.distributed "gloo", which has no shared memory and uses
#      loopback TCP); beside them this host's memcpy bandwidth (bench/membw.c); at 2 ranks from
#      32 KiB also with registered buffers: strata bench -R 1 (strata_mem_alloc, which the peer
#      reads directly) against OpenMPI with MPI_Alloc_mem (mpi_allreduce -R);
#   2. TCP only, 2 ranks in two network namespaces joined by a veth pair that this script creates
#      and removes: strata (STRATA_SHM=0, ranks started with `ip netns exec`), OpenMPI
#      (--mca btl tcp,self, mpirun inside the first namespace, rank 1 started into the second by
#      `ip netns exec` and reaching mpirun's PMIx server over the veth), Gloo (env:// init);
#      beside them iperf3 over the same veth in both directions at once.
# strata bench runs with -a 3 (each size's time is the slowest rank's), the figure both peers'
# drivers report; nccl-tests' default -a 1 is the mean over ranks.
#   3. torch.distributed, 2 and 4 ranks: all_reduce and a ~50M-parameter DDP step on the "strata"
#      backend against "gloo" in one job (bench/torch_allreduce.py); then interleaved pairs of
#      runs of strata's own C bench and torch-on-strata at >= 16 MiB, for what the backend adds
#      (skipped without strata.torch).
# Then bench/report.py prints per-size tables, ratios and the issue's targets as PASS/FAIL, and
# the whole report goes to bench/results/<date>.txt (raw JSON and logs beside it).
#
# Needs root (network namespaces). Environment: BUILD (build dir, default build), BENCH_QUICK=1
# (sizes to 4 MiB, few iterations: a smoke test of this script), BENCH_SKIP_TCP=1,
# BENCH_REPEAT=R (exactly R rounds), BENCH_BUDGET_S (default 840).
#
# Rounds: one round runs every configuration, the three libraries interleaved phase by phase.
# A machine that is not quiet stretches some calls by a scheduler quantum (busy-polling OpenMPI
# most of all), so the run repeats rounds while the next one still fits in the budget (at most
# 3), and the report keeps each library's fastest round per size: the same rule for all three.
# Addresses 10.99.0.1/2 exist only inside the namespaces; the trap removes them on any exit.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
BUILD=${BUILD:-$root/build}
[[ $BUILD = /* ]] || BUILD=$root/$BUILD
STRATA=$BUILD/strata
PY=${STRATA_PYTHON:-/usr/bin/python3} # the venv of scripts/venv.sh: torch 2.13 and numpy
TIMEOUT=${BENCH_TIMEOUT:-600}
BUDGET_S=${BENCH_BUDGET_S:-840}
MAX_ROUNDS=${BENCH_REPEAT:-3}

die() { echo "bench/run.sh: $*" >&2; exit 1; }
note() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

[ -x "$STRATA" ] || die "$STRATA not found: build first (make build, or BUILD=dir)"
command -v mpicc >/dev/null || die "mpicc not found (apt-get install libopenmpi-dev openmpi-bin)"
"$PY" -c 'import torch.distributed' 2>/dev/null || die "$PY has no torch (scripts/venv.sh makes build-venv; STRATA_PYTHON=build-venv/bin/python)"

stamp=$(date -u +%Y-%m-%d_%H%M%S)
results=$root/bench/results
raw=$results/$stamp
mkdir -p "$raw"
tools=$raw/bin
mkdir -p "$tools"

# ---- sizes and iterations: fewer iterations where one call takes long ----
# phase = "MIN MAX FACTOR ITERS WARMUP"; together 8 B .. 256 MiB (x4 to 2 MiB, then x2).
if [ "${BENCH_QUICK:-0}" = 1 ]; then
  phases=("8 8K 4 50 5" "32K 4M 4 5 1")
else
  phases=("8 8K 4 100 10" "32K 2M 4 20 3" "4M 256M 2 5 1")
fi

# ---- helpers ----
free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# run_logged NAME CMD...: runs CMD (a program or a function of this script) in its own process
# group, output to $raw/NAME.log; after $TIMEOUT seconds the whole group is killed.
set -m
run_logged() {
  local name=$1
  shift
  local start=$SECONDS status=0
  ("$@") >"$raw/$name.log" 2>&1 &
  local pid=$!
  (sleep "$TIMEOUT" && kill -TERM -- -"$pid" 2>/dev/null) &
  local watchdog=$!
  disown "$watchdog" # no "Terminated" job notice when it is killed below
  wait "$pid" || status=$?
  kill -- -"$watchdog" 2>/dev/null || true
  if [ "$status" = 0 ]; then
    note "  $name: done in $((SECONDS - start)) s"
  else
    note "  $name: FAILED (status $status, $((SECONDS - start)) s), see $raw/$name.log"
    tail -5 "$raw/$name.log" >&2 || true
  fi
}

# gloo_local N ARGS...: N Gloo ranks on this host (what torchrun would start).
gloo_local() {
  local n=$1
  shift
  local port pids=() status=0
  port=$(free_port)
  for ((r = 0; r < n; r++)); do
    RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      "$PY" "$here/gloo_allreduce.py" "$@" &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}

# ---- the tools ----
note "building bench tools into $tools"
gcc -std=gnu11 -O2 -Wall -Wextra -D_GNU_SOURCE "$here/membw.c" -o "$tools/membw" -lpthread
mpicc -std=gnu11 -O2 -Wall -Wextra "$here/mpi_allreduce.c" -o "$tools/mpi_allreduce"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe --bind-to none)

# ---- the TCP path: two network namespaces joined by a veth pair ----
ns_a=strata_bench_a_$$
ns_b=strata_bench_b_$$
veth_a=sbva$$
veth_b=sbvb$$
addr_a=10.99.0.1
addr_b=10.99.0.2
cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true # deleting a namespace deletes its veth end too
  ip netns del "$ns_b" 2>/dev/null || true
}
trap cleanup EXIT INT TERM

netns_up() {
  ip netns add "$ns_a"
  ip netns add "$ns_b"
  ip link add "$veth_a" type veth peer name "$veth_b"
  ip link set "$veth_a" netns "$ns_a"
  ip link set "$veth_b" netns "$ns_b"
  ip -n "$ns_a" addr add "$addr_a/24" dev "$veth_a"
  ip -n "$ns_b" addr add "$addr_b/24" dev "$veth_b"
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up; done
  ip -n "$ns_a" link set "$veth_a" up
  ip -n "$ns_b" link set "$veth_b" up
}

# strata_tcp PORT ARGS... (a fresh port for every run: no TIME_WAIT surprises)
strata_tcp() {
  local port=$1 status=0 pids=()
  shift
  local common=(STRATA_WORLD_SIZE=2 STRATA_ADDR=$addr_a:$port STRATA_SHM=0 STRATA_TIMEOUT=120)
  ip netns exec "$ns_a" env STRATA_RANK=0 "${common[@]}" "$STRATA" bench allreduce -a 3 "$@" &
  pids+=($!)
  ip netns exec "$ns_b" env STRATA_RANK=1 "${common[@]}" "$STRATA" bench allreduce -a 3 "$@" \
    >/dev/null &
  pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}

mpi_tcp() {
  # mpirun runs in namespace A; its PMIx server listens on the veth so rank 1, put into
  # namespace B by `ip netns exec` (MPMD syntax), can reach it. Only btl tcp between the ranks.
  ip netns exec "$ns_a" env PMIX_MCA_ptl_tcp_if_include=10.99.0.0/24 \
    PMIX_MCA_ptl_tcp_remote_connections=1 \
    "${MPIRUN[@]}" --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.99.0.0/24 \
    --mca oob_tcp_if_include 10.99.0.0/24 \
    -np 1 "$tools/mpi_allreduce" "$@" : \
    -np 1 ip netns exec "$ns_b" "$tools/mpi_allreduce" "$@"
}

# gloo_tcp PORT ARGS...: one Gloo rank per namespace.
gloo_tcp() {
  local port=$1 status=0 pids=()
  shift
  ip netns exec "$ns_a" env RANK=0 WORLD_SIZE=2 MASTER_ADDR=$addr_a MASTER_PORT=$port \
    GLOO_SOCKET_IFNAME=$veth_a "$PY" "$here/gloo_allreduce.py" "$@" &
  pids+=($!)
  ip netns exec "$ns_b" env RANK=1 WORLD_SIZE=2 MASTER_ADDR=$addr_a MASTER_PORT=$port \
    GLOO_SOCKET_IFNAME=$veth_b "$PY" "$here/gloo_allreduce.py" "$@" >/dev/null &
  pids+=($!)
  for pid in "${pids[@]}"; do wait "$pid" || status=1; done
  return $status
}

# iperf3 over the veth, both directions at once: --bidir (one process each side) and two
# independent client/server pairs (two processes each side); the report takes the better.
iperf_duplex() {
  local round=$1 servers=() status=0
  local p=$((5300 + 10 * round))
  ip netns exec "$ns_b" iperf3 -s -1 -p $p >/dev/null 2>&1 &
  servers+=($!)
  sleep 0.5
  ip netns exec "$ns_a" iperf3 -c "$addr_b" -p $p --bidir -t 5 -J \
    >"$raw/iperf_bidir_r$round.json" || status=1
  ip netns exec "$ns_b" iperf3 -s -1 -p $((p + 1)) >/dev/null 2>&1 &
  servers+=($!)
  ip netns exec "$ns_a" iperf3 -s -1 -p $((p + 2)) >/dev/null 2>&1 &
  servers+=($!)
  sleep 0.5
  ip netns exec "$ns_a" iperf3 -c "$addr_b" -p $((p + 1)) -t 5 -J \
    >"$raw/iperf_pair_ab_r$round.json" &
  local ab=$!
  ip netns exec "$ns_b" iperf3 -c "$addr_a" -p $((p + 2)) -t 5 -J \
    >"$raw/iperf_pair_ba_r$round.json" || status=1
  wait "$ab" || status=1
  kill "${servers[@]}" 2>/dev/null || true # one-off servers normally exit by themselves
  return $status
}

# ---- the rounds ----
# shm_round ROUND N: one host, shared memory, N ranks.
shm_round() {
  local round=$1 n=$2 i lo hi f it w run
  note "round $round: shared memory, $n ranks"
  for i in "${!phases[@]}"; do
    read -r lo hi f it w <<<"${phases[$i]}"
    local args=(-b "$lo" -e "$hi" -f "$f" -n "$it" -w "$w")
    run=${i}_r$round
    run_logged "shm${n}_strata_$run" "$STRATA" launch -n "$n" -- \
      "$STRATA" bench allreduce -a 3 "${args[@]}" -J "$raw/shm${n}_strata_$run.json"
    run_logged "shm${n}_mpi_$run" "${MPIRUN[@]}" -np "$n" "$tools/mpi_allreduce" "${args[@]}" \
      -J "$raw/shm${n}_mpi_$run.json"
    run_logged "shm${n}_gloo_$run" gloo_local "$n" "${args[@]}" -J "$raw/shm${n}_gloo_$run.json"
    # registered buffers: 2 ranks, the phases past the inline sizes (< 32 KiB never use them)
    if [ "$n" = 2 ] && [ "$i" -gt 0 ]; then
      run_logged "shm2r_strata_$run" "$STRATA" launch -n 2 -- \
        "$STRATA" bench allreduce -a 3 "${args[@]}" -R 1 -J "$raw/shm2r_strata_$run.json"
      run_logged "shm2r_mpi_$run" "${MPIRUN[@]}" -np 2 "$tools/mpi_allreduce" "${args[@]}" -R \
        -J "$raw/shm2r_mpi_$run.json"
    fi
  done
}

# tcp_round ROUND: TCP only, one rank in each namespace.
tcp_round() {
  local round=$1 i lo hi f it w run port
  note "round $round: TCP, 2 ranks across the namespaces"
  run_logged "iperf_r$round" iperf_duplex "$round"
  for i in "${!phases[@]}"; do
    read -r lo hi f it w <<<"${phases[$i]}"
    local args=(-b "$lo" -e "$hi" -f "$f" -n "$it" -w "$w")
    run=${i}_r$round
    port=$((29400 + 100 * round + 10 * i))
    run_logged "tcp2_strata_$run" strata_tcp "$port" "${args[@]}" -J "$raw/tcp2_strata_$run.json"
    run_logged "tcp2_mpi_$run" mpi_tcp "${args[@]}" -J "$raw/tcp2_mpi_$run.json"
    run_logged "tcp2_gloo_$run" gloo_tcp $((port + 5)) "${args[@]}" -J "$raw/tcp2_gloo_$run.json"
  done
}

echo "start $(cat /proc/loadavg)" >"$raw/loadavg.txt"
if [ "${BENCH_SKIP_TCP:-0}" != 1 ]; then
  [ "$(id -u)" = 0 ] || die "the TCP part needs root (network namespaces); BENCH_SKIP_TCP=1 skips it"
  note "TCP: namespaces $ns_a ($addr_a) and $ns_b ($addr_b) over a veth pair"
  netns_up
fi
run_start=$SECONDS
for ((round = 1; round <= MAX_ROUNDS; round++)); do
  elapsed=$((SECONDS - run_start))
  if [ -z "${BENCH_REPEAT:-}" ] && [ "$round" -gt 1 ] &&
    [ $((elapsed + elapsed / (round - 1))) -gt "$BUDGET_S" ]; then
    note "round $round would not fit in ${BUDGET_S} s (a round took ~$((elapsed / (round - 1))) s); stopping"
    break
  fi
  run_logged "membw_r$round" "$tools/membw" -s 256 -r 5 -J "$raw/membw_r$round.json"
  shm_round "$round" 2
  shm_round "$round" 4
  [ "${BENCH_SKIP_TCP:-0}" = 1 ] || tcp_round "$round"
done
cleanup

# torch_run N: the backends side by side at N ranks (4 ranks on this machine's 2 cores: fewer
# sizes, fewer DDP steps); then pairs of runs, strata's C bench and torch-on-strata over the same
# sizes with the same iterations, interleaved in time (C first, then torch first), for what the
# backend adds to the C library.
torch_run() {
  local n=$1 args=(-b 1K -e 256M -f 4) pairs=6
  [ "$n" = 2 ] || { args=(-b 1K -e 256M -f 8); pairs=2; }
  local c_args=(allreduce -a 3 -b 16M -e 256M -f 2 -n 20 -w 1)  # -a 3: the slowest rank, as torch_allreduce.py times
  local t_args=(-b 16M -e 256M -f 2 --iters 20 --rounds 1 --strata-only --layers 0)
  if [ "${BENCH_QUICK:-0}" = 1 ]; then
    args=(-b 1K -e 4M -f 16 --rounds 1 --layers 1 --pairs 2)
    c_args=(allreduce -a 3 -b 1M -e 4M -f 4 -n 5 -w 1)
    t_args=(-b 1M -e 4M -f 4 --iters 5 --rounds 1 --strata-only --layers 0)
    pairs=2
  fi
  note "torch.distributed: strata against gloo, $n ranks"
  run_logged "torch${n}" env PYTHONPATH="$BUILD/python" "$STRATA" launch -n "$n" -- \
    "$PY" "$here/torch_allreduce.py" "${args[@]}" -J "$raw/torch${n}.json"
  note "torch.distributed: torch-on-strata against strata's C bench, $n ranks, $pairs pairs"
  local k
  for ((k = 1; k <= pairs; k++)); do
    local c=(run_logged "torch${n}_c$k" "$STRATA" launch -n "$n" -- "$STRATA" bench "${c_args[@]}"
      -J "$raw/torch${n}_c$k.json")
    local t=(run_logged "torch${n}_t$k" env PYTHONPATH="$BUILD/python" "$STRATA" launch -n "$n" --
      "$PY" "$here/torch_allreduce.py" "${t_args[@]}" -J "$raw/torch${n}_t$k.json")
    if ((k % 2)); then "${c[@]}"; "${t[@]}"; else "${t[@]}"; "${c[@]}"; fi
  done
}
if compgen -G "$BUILD/python/strata/_torch*.so" >/dev/null; then
  torch_run 2
  torch_run 4
else
  note "torch.distributed: skipped, $BUILD/python/strata has no _torch module (strata.torch)"
fi
echo "end $(cat /proc/loadavg)" >>"$raw/loadavg.txt"

# ---- the report ----
report=$results/$stamp.txt
"$PY" "$here/report.py" "$raw" --strata "$STRATA" >"$report"
for n in 2 4; do
  [ -f "$raw/torch$n.json" ] || continue
  echo >>"$report"
  pair_args=()
  for c in "$raw/torch${n}"_c*.json; do
    k=${c##*_c}; k=${k%.json}
    [ -f "$raw/torch${n}_t$k.json" ] && pair_args+=(--pair "$raw/torch${n}_t$k.json" "$c")
  done
  "$PY" "$here/torch_allreduce.py" --report "$raw/torch$n.json" "${pair_args[@]}" >>"$report" || true
done
cat "$report"
note "report: $report (raw results in $raw)"
