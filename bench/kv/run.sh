#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/kv/run.sh — KV transfer (docs/kv.md) against its references, interleaved round by round:
#
#   ucx  strata-kv-bench -B ucx: WRITE of KV_TOTAL bytes as blocks of each size, prefill ->
#        decode, beside ucx_perftest -t ucp_am_bw with messages of that size on the same UCX
#        transport, for UCX_TLS=tcp and UCX_TLS=shm (shared memory, cma among it), configured as
#        the backend configures it: over tcp with endpoints that report a peer's failure (`-e`,
#        UCP_ERR_HANDLING_MODE_PEER, which the backend needs and which leaves UCX no rendezvous
#        by put over tcp and no second rail) and tcp segments of the backend's size
#        (UCX_TCP_RX_SEG_SIZE=256k); over shm without (the backend cannot have it there). Each
#        ratio is against the faster of perftest with UCX's default protocols and forced eager
#        (UCX_RNDV_THRESH=inf) in that round. Over tcp perftest as UCX ships it (no `-e`, 64 KiB
#        segments) runs too, for reference only.
#   tcp  strata-kv-bench -B tcp beside iperf3 over loopback, 4 streams, both directions at once.
#   shm  strata-kv-bench -B shm beside memcpy bandwidth of one thread (bench/membw.c).
#
# Every configuration runs once per round, in turn, so a change of load on a shared host touches
# both sides of a ratio alike; the report gives each ratio per round and their median, and the
# load average at the start of each round. Raw logs: bench/results/kv-<UTC time>/.
#
# usage: bench/kv/run.sh [ROUNDS (default 3)]
# env:   BUILD (default build), KV_TOTAL (default 1G), KV_SIZES (bytes, default
#        "262144 1048576 4194304"), KV_ITERS (timed transfers per size, default 3)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-$root/build}
[[ $BUILD = /* ]] || BUILD=$root/$BUILD
ROUNDS=${1:-3}
TOTAL=${KV_TOTAL:-1G}
SIZES=${KV_SIZES:-"262144 1048576 4194304"}
ITERS=${KV_ITERS:-3}
STREAMS=4 # strata-kv-bench's default
KVB=$BUILD/strata-kv-bench
die() { echo "bench/kv/run.sh: $*" >&2; exit 1; }
[ -x "$KVB" ] || die "$KVB not built (make test or cmake -DSTRATA_BUILD_TESTS=ON)"
command -v ucx_perftest >/dev/null || die "ucx_perftest missing (apt-get install ucx-utils)"
command -v iperf3 >/dev/null || die "iperf3 missing"
out=$root/bench/results/kv-$(date -u +%Y%m%dT%H%M%SZ)
mkdir -p "$out"
gcc -O2 "$root/bench/membw.c" -o "$out/membw" -lpthread

total_bytes=$(python3 -c "
import sys; t=sys.argv[1]; m={'K':1<<10,'M':1<<20,'G':1<<30}
print(int(float(t[:-1])*m[t[-1].upper()]) if t[-1].upper() in m else int(t))" "$TOTAL")
min_size=$(echo $SIZES | tr ' ' '\n' | sort -n | head -1)
max_size=$(echo $SIZES | tr ' ' '\n' | sort -n | tail -1)
port=$((20000 + RANDOM % 20000))

perftest() { # tls eager size log [as-shipped]
  local tls=$1 eager=$2 size=$3 log=$4 n=$((total_bytes / $3))
  local env=(UCX_TLS=$tls) flags=()
  [ "$eager" = 1 ] && env+=(UCX_RNDV_THRESH=inf)
  if [ "$tls" = tcp ] && [ "${5:-0}" = 0 ]; then # as the backend: kv_ucx.c's KV_UCX_TCP_SEG
    env+=(UCX_TCP_RX_SEG_SIZE=256k)
    flags+=(-e)
  fi
  port=$((port + 1))
  env "${env[@]}" timeout 300 ucx_perftest -p $port >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  # as many messages outstanding as the backend has bytes in flight: its streams x a batch of
  # at most 4 slices of 1 MiB each (KV_UCX_BATCH_SLICES_OF_BYTES)
  local outstanding=$(((STREAMS << 22) / size))
  [ $outstanding -ge 1 ] || outstanding=1
  env "${env[@]}" timeout 300 ucx_perftest 127.0.0.1 -p $port -t ucp_am_bw -s "$size" \
    -n $((n * ITERS)) -w "$n" -O $outstanding -f "${flags[@]}" >"$log" 2>&1 ||
    echo "perftest failed: $log" >&2
  wait $server 2>/dev/null || true
}

for round in $(seq 1 "$ROUNDS"); do
  echo "round $round: load $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt" >&2
  for tls in tcp shm; do
    UCX_TLS=$tls "$KVB" -B ucx -N -t "$TOTAL" -b "$min_size" -e "$max_size" -f 4 -n "$ITERS" \
      -w 1 >"$out/r$round-kv-ucx-$tls.txt" 2>&1 || echo "kv ucx $tls failed" >&2
    # perftest sends one buffer of the message's size over and over, which stays in the cache;
    # the same with a region of the largest block's size, for the like-for-like figure
    UCX_TLS=$tls "$KVB" -B ucx -N -t "$max_size" -b "$min_size" -e "$max_size" -f 4 -n 100 \
      -w 5 >"$out/r$round-kv-ucx-cached-$tls.txt" 2>&1 || echo "kv ucx cached $tls failed" >&2
    for size in $SIZES; do
      perftest $tls 1 "$size" "$out/r$round-perftest-eager-$tls-$size.txt"
      perftest $tls 0 "$size" "$out/r$round-perftest-default-$tls-$size.txt"
      if [ $tls = tcp ]; then
        perftest $tls 0 "$size" "$out/r$round-perftest-shipped-$tls-$size.txt" 1
      fi
    done
  done
  "$KVB" -B tcp -N -t "$TOTAL" -b "$min_size" -e "$max_size" -f 4 -n "$ITERS" -w 1 \
    >"$out/r$round-kv-tcp.txt" 2>&1 || echo "kv tcp failed" >&2
  iperf3 -s -1 -p $((port + 500)) >/dev/null 2>&1 &
  sleep 0.5
  iperf3 -c 127.0.0.1 -p $((port + 500)) -t 5 -P 4 --bidir -J >"$out/r$round-iperf3.json" 2>&1 ||
    echo "iperf3 failed" >&2
  wait || true
  "$KVB" -B shm -N -t "$TOTAL" -b "$min_size" -e "$max_size" -f 4 -n "$ITERS" -w 1 \
    >"$out/r$round-kv-shm.txt" 2>&1 || echo "kv shm failed" >&2
  "$out/membw" -s 256 -r 5 -t 2 >"$out/r$round-membw.json" 2>&1 || echo "membw failed" >&2
done

# Small blocks and the lane, once, every backend (UCX over tcp): 16 KiB blocks, then 4 KiB lane
# round trips idle, during bulk WRITEs, and the same bytes as a WRITE queued behind one.
echo "lane: load $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/load.txt"
UCX_TLS=tcp "$KVB" -B tcp,shm,ucx -t 256M -b 16K -e 16K -n 2 -w 1 -L 2000 >"$out/lane.txt" 2>&1 ||
  echo "lane run failed" >&2

python3 - "$out" "$ROUNDS" "$SIZES" <<'PY' | tee "$out/summary.txt"
import json, re, statistics, sys
out, rounds, sizes = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split()]

def kv(path):  # size -> GB/s
    rows = {}
    try:
        for line in open(path):
            f = line.split()
            if len(f) >= 4 and f[0].isdigit():
                rows[int(f[0])] = float(f[3])
    except OSError:
        pass
    return rows

def perftest(path):  # GB/s from the last row of `-f`: overall bandwidth in MB/s (2^20 B)
    value = None
    try:
        for line in open(path):
            f = line.split()
            if len(f) == 8 and f[0].isdigit():
                value = float(f[5]) * 1048576 / 1e9
    except (OSError, ValueError):
        pass
    return value

def iperf(path):  # both directions at once, GB/s
    try:
        end = json.load(open(path))["end"]
        return (end["sum_sent"]["bits_per_second"] + end["sum_sent_bidir_reverse"]["bits_per_second"]) / 8e9
    except Exception:
        return None

def membw(path):
    try:
        return json.loads(open(path).read().strip().splitlines()[-1])["memcpy_1thread_gbps"]
    except Exception:
        return None

def fmt(v):
    return "   -  " if v is None else f"{v:6.2f}"

print(f"# {open(out + '/load.txt').read().strip()}".replace("\n", "\n# "))
print("# GB/s = 1e9 B/s; each ratio from one round; median over rounds")
for tls in ("tcp", "shm"):
    print(f"\n## UCX backend vs ucx_perftest ucp_am_bw, UCX_TLS={tls}")
    print("# strata: a 1 GiB region (memory-bound) and a region of the largest block (cached,")
    print("# as perftest's one buffer is); perftest configured as the backend (tcp: -e, 256 KiB")
    print("# segments) with UCX's default protocols and forced eager; ratios against the faster")
    print("# of those two; 'pt shipped' (tcp: no -e, UCX's segments) for reference only")
    print(f"{'size(B)':>9} {'round':>5} {'strata 1G':>9} {'strata cached':>13} {'pt default':>10} {'pt eager':>8} {'pt shipped':>10} {'ratio 1G':>8} {'ratio cached':>12}")
    for size in sizes:
        ratios, cached_ratios = [], []
        for r in range(1, rounds + 1):
            mine = kv(f"{out}/r{r}-kv-ucx-{tls}.txt").get(size)
            cached = kv(f"{out}/r{r}-kv-ucx-cached-{tls}.txt").get(size)
            eager = perftest(f"{out}/r{r}-perftest-eager-{tls}-{size}.txt")
            default = perftest(f"{out}/r{r}-perftest-default-{tls}-{size}.txt")
            shipped = perftest(f"{out}/r{r}-perftest-shipped-{tls}-{size}.txt")
            best = max([v for v in (eager, default) if v], default=None)
            ratio = mine / best if mine and best else None
            cached_ratio = cached / best if cached and best else None
            if ratio: ratios.append(ratio)
            if cached_ratio: cached_ratios.append(cached_ratio)
            print(f"{size:9d} {r:5d} {fmt(mine):>9} {fmt(cached):>13} {fmt(default):>10} {fmt(eager):>8} {fmt(shipped):>10} {fmt(ratio):>8} {fmt(cached_ratio):>12}")
        if ratios and cached_ratios:
            print(f"{size:9d} {'med':>5} {'':>9} {'':>13} {'':>10} {'':>8} {'':>10} {statistics.median(ratios):8.2f} {statistics.median(cached_ratios):12.2f}")
print("\n## 16 KiB blocks (256 MiB per transfer) and the 4 KiB lane, one run (UCX_TLS=tcp)")
print(f"{'backend':>8} {'16K GB/s':>9} {'idle p50':>9} {'idle p99':>9} {'bulk p50':>9} {'bulk p99':>9} {'behind bulk':>12}  (us)")
backend, row = None, {}
def flush():
    if backend:
        print(f"{backend:>8} {row.get('bw', '-'):>9} {row.get('ip50', '-'):>9} {row.get('ip99', '-'):>9} {row.get('bp50', '-'):>9} {row.get('bp99', '-'):>9} {row.get('behind', '-'):>12}")
try:
    for line in open(f"{out}/lane.txt"):
        m = re.match(r"# backend (\w+)", line)
        if m:
            flush(); backend, row = m.group(1), {}
            continue
        f = line.split()
        if len(f) >= 4 and f[0] == "16384": row["bw"] = f[3]
        m = re.search(r"idle\s+p50\s+([\d.]+)\s+p99\s+([\d.]+)", line)
        if m: row["ip50"], row["ip99"] = m.groups()
        m = re.search(r"during bulk WRITEs\s+p50\s+([\d.]+)\s+p99\s+([\d.]+)", line)
        if m: row["bp50"], row["bp99"] = m.groups()
        m = re.search(r"median ([\d.]+)", line)
        if m: row["behind"] = m.group(1)
    flush()
except OSError:
    print("(no lane run)")

for name, ref_name, ref in (("tcp", "iperf3 duplex", lambda r: iperf(f"{out}/r{r}-iperf3.json")),
                            ("shm", "memcpy 1 thread", lambda r: membw(f"{out}/r{r}-membw.json"))):
    print(f"\n## strata {name} backend vs {ref_name}")
    print(f"{'size(B)':>9} {'round':>5} {'strata':>7} {ref_name:>16} {'ratio':>6}")
    for size in sizes:
        ratios = []
        for r in range(1, rounds + 1):
            mine = kv(f"{out}/r{r}-kv-{name}.txt").get(size)
            limit = ref(r)
            ratio = mine / limit if mine and limit else None
            if ratio: ratios.append(ratio)
            print(f"{size:9d} {r:5d} {fmt(mine):>7} {fmt(limit):>16} {fmt(ratio):>6}")
        if ratios:
            print(f"{size:9d} {'med':>5} {'':>7} {'':>16} {statistics.median(ratios):6.2f}")
PY
echo "raw logs: $out" >&2
