#!/usr/bin/env bash
# bench/wan.sh [BUILD_DIR] — issue 4, point 2: a 256 MiB float allreduce between two emulated
# sites joined by a 1 Gb/s, 50 ms RTT link, strata against Gloo and OpenMPI on the same link, in
# the same run. One command, root only, about 5 minutes.
#
# The link: `strata netem` (docs/netem.md) with 2 sites, rate=1gbit and delay=25ms each way
# (RTT 50 ms), tcp_rmem/tcp_wmem maxima raised to 64 MiB inside the sites (--tcp-mem-max), one
# rank per site. Nothing else of the host is touched; `netem down` runs on exit.
#
# The bound. A 2-rank allreduce of N bytes (ring = reduce-scatter + all-gather; any algorithm
# must move at least this much) has each rank send N/2 + N/2 = N bytes over its one outgoing
# direction, so t_min = N / R with R = 1 Gb/s = 125 MB/s: 256 MiB -> 2.147 s. % of bound =
# t_min / t (= busbw / 125 MB/s, busbw = N/t·2(n-1)/n, nccl-tests' factor, FACTS.md). R counts IP
# bytes; TCP with timestamps carries 1448 of every 1500, so 96.5% is the practical ceiling.
#
# The runs: strata with STRATA_TCP_STREAMS in $WAN_STREAMS and STRATA_TCP_CC in $WAN_CCS (each
# combination reported), STRATA_SHM=0 (the sites are different namespaces anyway); Gloo
# (bench/gloo_allreduce.py, torch.distributed "gloo", GLOO_SOCKET_IFNAME=netem0); OpenMPI
# (bench/mpi_allreduce.c, --mca pml ob1 --mca btl tcp,self, mpirun in site 0, rank 1 entered
# into site 1 with `ip netns exec`). Peers run with the sites' default congestion control.
# Gloo and OpenMPI get fewer iterations and a timeout; a run that times out is reported as
# "> T s" and its ratio as a lower bound.
#
# Knobs (environment): WAN_RATE (1gbit), WAN_DELAY (25ms one way), WAN_SIZE (256M),
# WAN_STREAMS ("4 8 16"), WAN_CCS ("bbr cubic"), WAN_ITERS (3), WAN_PEER_ITERS (2),
# WAN_PEER_TIMEOUT_S (150), WAN_SKIP_PEERS=1 (strata only), WAN_CHUNK (4M; "" = no extra run
# with STRATA_CHUNK set).
# Output: a table on stdout, raw JSON and logs in bench/results/wan-DATE/ (gitignored).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
STRATA=$(cd "$build" 2>/dev/null && pwd)/strata
[ -x "$STRATA" ] || { echo "wan.sh: $build/strata is missing (build first)" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ]; then
  echo "wan.sh: needs root and /dev/net/tun (network namespaces + TUN)" >&2; exit 1
fi
PY=/usr/bin/python3
rate=${WAN_RATE:-1gbit}
delay=${WAN_DELAY:-25ms}
size=${WAN_SIZE:-256M}
streams_list=${WAN_STREAMS:-4 8 16}
ccs=${WAN_CCS:-bbr cubic}
iters=${WAN_ITERS:-3}
peer_iters=${WAN_PEER_ITERS:-2}
peer_timeout=${WAN_PEER_TIMEOUT_S:-150}
name=wan$$
out=$here/results/wan-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
addr0=10.77.0.1
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  "$STRATA" netem down --name "$name" >/dev/null 2>&1
}
trap cleanup EXIT INT TERM

note() { echo "# $*" >&2; }
note "link: rate=$rate delay=$delay each way, allreduce $size float, results in $out"
"$STRATA" netem up --name "$name" --sites 2 --lifetime 1200 --tcp-mem-max 64m \
  --link "0-1:rate=$rate,delay=$delay" >"$out/netem_up.log" 2>&1 ||
  { cat "$out/netem_up.log" >&2; echo "wan.sh: netem up failed" >&2; exit 1; }
in_site() { local s=$1; shift; "$STRATA" netem exec --name "$name" "$s" -- "$@"; }
port=$((21000 + RANDOM % 20000))

# run_strata LABEL ENV...: 2 ranks, rank 0 hosts the store
run_strata() {
  local label=$1 status=0 rp=()
  shift
  port=$((port + 1))
  local common=(STRATA_WORLD_SIZE=2 STRATA_ADDR=$addr0:$port STRATA_SHM=0 STRATA_TIMEOUT=120 "$@")
  for r in 0 1; do
    timeout -k 2 120 "$STRATA" netem exec --name "$name" "$r" -- env STRATA_RANK=$r "${common[@]}" \
      "$STRATA" bench allreduce -b "$size" -e "$size" -n "$iters" -w 1 -J "$out/$label.r$r.json" \
      >"$out/$label.r$r.log" 2>&1 &
    rp+=($!)
  done
  for pid in "${rp[@]}"; do wait "$pid" || status=1; done
  mv "$out/$label.r0.json" "$out/$label.json" 2>/dev/null
  return $status
}

run_gloo() {
  local status=0 rp=()
  port=$((port + 1))
  for r in 0 1; do
    timeout -k 2 "$peer_timeout" "$STRATA" netem exec --name "$name" "$r" -- env RANK=$r \
      WORLD_SIZE=2 MASTER_ADDR=$addr0 MASTER_PORT=$port GLOO_SOCKET_IFNAME=netem0 \
      "$PY" "$here/gloo_allreduce.py" -b "$size" -e "$size" -n "$peer_iters" -w 1 \
      -J "$out/gloo.r$r.json" >"$out/gloo.r$r.log" 2>&1 &
    rp+=($!)
  done
  for pid in "${rp[@]}"; do wait "$pid" || status=1; done
  mv "$out/gloo.r0.json" "$out/gloo.json" 2>/dev/null
  return $status
}

run_mpi() {
  local tools=$out/tools
  mkdir -p "$tools"
  mpicc -std=gnu11 -O2 "$here/mpi_allreduce.c" -o "$tools/mpi_allreduce" >"$out/mpicc.log" 2>&1 ||
    return 1
  # mpirun in site 0; its PMIx server listens on netem0 so rank 1 (in site 1) reaches it.
  timeout -k 2 "$peer_timeout" "$STRATA" netem exec --name "$name" 0 -- env \
    PMIX_MCA_ptl_tcp_if_include=10.77.0.0/16 PMIX_MCA_ptl_tcp_remote_connections=1 \
    mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/16 --mca oob_tcp_if_include 10.77.0.0/16 \
    -np 1 "$tools/mpi_allreduce" -b "$size" -e "$size" -n "$peer_iters" -w 1 -J "$out/mpi.json" : \
    -np 1 ip netns exec "$name-s1" "$tools/mpi_allreduce" -b "$size" -e "$size" -n "$peer_iters" \
    -w 1 >"$out/mpi.log" 2>&1
}

# What the emulated link delivers both ways at once on this host (the forwarder shares the CPU
# with the ranks): iperf3 --bidir with 4 streams, 8 s, the mean of the two directions.
iperf_ref() {
  in_site 1 iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  pids+=($!)
  sleep 0.5
  timeout -k 2 30 "$STRATA" netem exec --name "$name" 0 -- iperf3 -c 10.77.1.1 -p 5201 -P 4 \
    --bidir -t 8 -O 2 -J >"$out/iperf_bidir.json" 2>/dev/null
}
if command -v iperf3 >/dev/null; then
  note "iperf3 --bidir -P 4 reference"
  iperf_ref || note "iperf3 failed"
fi

labels=()
for cc in $ccs; do
  for s in $streams_list; do
    label=strata_s${s}_$cc
    note "strata streams=$s cc=$cc"
    run_strata "$label" STRATA_TCP_STREAMS=$s STRATA_TCP_CC=$cc || note "$label failed (see $out/$label.r*.log)"
    labels+=("$label")
  done
done
# The ring's pipeline keeps about STRATA_COLL_RING_WINDOW (4) chunks in flight per direction;
# with the default 1 MiB chunk that is ~4 MiB, less than the 6.25 MB this link holds, so one more
# run with bigger chunks shows what the transport does when the algorithm is not the limit.
if [ -n "${WAN_CHUNK:-4M}" ]; then
  s=$(echo $streams_list | awk '{print $NF}')
  cc=$(echo $ccs | awk '{print $1}')
  label=strata_s${s}_${cc}_chunk${WAN_CHUNK:-4M}
  note "strata streams=$s cc=$cc STRATA_CHUNK=${WAN_CHUNK:-4M}"
  run_strata "$label" STRATA_TCP_STREAMS=$s STRATA_TCP_CC=$cc STRATA_CHUNK=${WAN_CHUNK:-4M} ||
    note "$label failed (see $out/$label.r*.log)"
  labels+=("$label")
fi
if [ "${WAN_SKIP_PEERS:-0}" != 1 ]; then
  note "gloo (timeout $peer_timeout s)"
  run_gloo || note "gloo failed or timed out (see $out/gloo.r*.log)"
  note "openmpi (timeout $peer_timeout s)"
  run_mpi || note "openmpi failed or timed out (see $out/mpi.log)"
  labels+=(gloo mpi)
fi

"$PY" - "$out" "$size" "$rate" "$peer_timeout" "${labels[@]}" <<'PY' | tee "$out/table.txt"
import json, os, re, sys
out, size_text, rate_text, timeout_s = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
labels = sys.argv[5:]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
n = int(float(size_text[:-1]) * units[size_text[-1].upper()]) if size_text[-1].upper() in units else int(size_text)
m = re.fullmatch(r"([\d.]+)([kmg]?)bit", rate_text)
rate_bps = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
t_min = n / (rate_bps / 8)
def time_s(label):
    try:
        j = json.load(open(os.path.join(out, label + ".json")))
    except (OSError, ValueError):
        return None
    best = None
    for r in j.get("results", []):
        for k in ("out_of_place", "in_place"):
            f = r.get(k)
            if f and f.get("time_us") and not f.get("wrong"):
                t = f["time_us"] / 1e6
                best = t if best is None else min(best, t)
    return best
times = {l: time_s(l) for l in labels}
try:
    ip = json.load(open(os.path.join(out, "iperf_bidir.json")))["end"]
    both = [ip["sum_sent"]["bits_per_second"], ip["sum_sent_bidir_reverse"]["bits_per_second"]]
    print("# iperf3 --bidir -P 4 on the same link: %.0f and %.0f Mbit/s (%.1f%% of the rate, mean): "
          "the ceiling this host's emulator gives traffic in both directions at once" %
          (both[0] / 1e6, both[1] / 1e6, 100 * sum(both) / 2 / rate_bps))
except (OSError, ValueError, KeyError):
    pass
print("# 2-rank allreduce of %d bytes over %s, 2 sites; link bound t_min = N / R = %.3f s "
      "(each rank sends N bytes over one direction)" % (n, rate_text, t_min))
print("%-20s %10s %12s %9s %10s %10s" % ("run", "time_s", "busbw_MB/s", "%bound", "vs_gloo", "vs_mpi"))
def fmt_ratio(t, peer):
    tp = times.get(peer)
    if peer not in times or t is None: return "-"
    if tp is None: return "> %.1fx" % (timeout_s / t)
    return "%.1fx" % (tp / t)
for l in labels:
    t = times[l]
    if t is None:
        shown = "> %.0f" % timeout_s if l in ("gloo", "mpi") else "failed"
        print("%-20s %10s %12s %9s" % (l, shown, "-", "-"))
        continue
    strata = l.startswith("strata")
    print("%-20s %10.3f %12.1f %8.1f%% %10s %10s" % (l, t, n / t / 1e6, 100 * t_min / t,
          fmt_ratio(t, "gloo") if strata else "", fmt_ratio(t, "mpi") if strata else ""))
PY
