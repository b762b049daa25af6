#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/wan.sh [BUILD_DIR] — issue 4, point 2: a 256 MiB float allreduce between two emulated
# sites joined by a 1 Gb/s, 50 ms RTT link, strata against Gloo and OpenMPI on the same link, in
# the same run, on a clean link and on lossy ones. One command, root only, ~10-15 minutes.
#
# The links: `strata netem` (docs/netem.md) with 2 sites, one rank per site, one condition per
# entry of $WAN_LINKS (default: clean = rate=1gbit,delay=25ms each way; loss0.01 and loss0.1 =
# the same with loss=0.01% / 0.1% each way, the small random loss real long paths have). The
# emulator is brought up afresh for each condition and taken down on exit; nothing else of the
# host is touched.
#
# Fairness. Every program runs with the HOST'S DEFAULT TCP settings, as a user would have them:
# the sites keep the host's net.ipv4.tcp_rmem/tcp_wmem and net.core.*mem_max (--tcp-mem-max host;
# with Linux's default tcp_wmem[2] of 4 MiB, ONE connection can keep at most ~4 MiB in flight,
# less than the 6.25 MB the default link holds) and the host's default congestion control. Gloo and OpenMPI
# use them as they are. strata applies its own tuning on top: many streams per peer (its default,
# 4), buffers sized from the measured RTT, TCP_NOTSENT_LOWAT on WAN sockets (docs/wan.md). The
# row "strata" is strata with NO knobs set; other rows name the knobs they set.
#
# The bound. A 2-rank allreduce of N bytes (ring = reduce-scatter + all-gather; any algorithm
# must move at least this much) has each rank send N bytes over its one outgoing direction, so
# t_min = N / R with R = 1 Gb/s = 125 MB/s: 256 MiB -> 2.147 s. % of bound = t_min / t (= busbw /
# 125 MB/s, busbw = N/t·2(n-1)/n, the factor of nccl-tests doc/PERFORMANCE.md). R counts IP
# bytes; TCP with timestamps carries 1448 of every 1500, so 96.5% is the ceiling of any TCP
# program. The practical ceiling of the machine running it is printed too: iperf3 --bidir -P 8
# over the same link (the emulator shares the CPU with the ranks).
#
# The runs per condition: strata (no knobs), strata with each entry of $WAN_STRATA_VARIANTS,
# each WAN_REPEAT times (the rows then show the median run, and the range);
# Gloo (bench/gloo_allreduce.py, torch.distributed "gloo", GLOO_SOCKET_IFNAME=netem0); OpenMPI
# (bench/mpi_allreduce.c, --mca pml ob1 --mca btl tcp,self, mpirun in site 0, rank 1 entered into
# site 1 with `ip netns exec`). Times are the best of the timed calls (out of place or in place).
# Gloo and OpenMPI get fewer iterations and a timeout; a run that times out is reported as "> T s"
# and its ratio as a lower bound (">").
#
# Each strata run also reads the sites' TCP counters (/proc/net/snmp in each namespace) before and
# after: "retx%" is RetransSegs / OutSegs of both sites over the run, warm-up included, which is
# where a link whose queue overflows shows it.
#
# Knobs (environment): WAN_LINKS ("clean:rate=1gbit,delay=25ms loss0.01:...,loss=0.01%
# loss0.1:...,loss=0.1%"), WAN_SIZE (256M), WAN_STRATA_VARIANTS ("STRATA_TCP_GOVERN=0
# STRATA_TCP_STREAMS=8,STRATA_TCP_CC=cubic STRATA_TCP_STREAMS=8,STRATA_TCP_CC=bbr"; commas separate
# the variables of one variant), WAN_REPEAT (1),
# WAN_ITERS (3), WAN_PEER_ITERS (2), WAN_WARMUP (3: untimed calls before the timed ones, the same for
# every program, as nccl-tests warms up; a connection leaves its congestion control's startup in
# the first, and the window governor takes hold during it), WAN_PEER_TIMEOUT_S (150), WAN_SKIP_PEERS=1 (strata only),
# WAN_STRATA_ARGS (more `strata bench` arguments for the strata rows, e.g. "--compress int8": the
# peers have no such encoding, so compare those rows with each other, not with the peers),
# WAN_TCP_MEM (host; a size such as 64m raises the sites' maxima for everyone).
# Output: a table on stdout, raw JSON and logs in bench/results/wan-DATE/ (gitignored).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
STRATA=$(cd "$build" 2>/dev/null && pwd)/strata
[ -x "$STRATA" ] || { echo "wan.sh: $build/strata is missing (build first)" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ]; then
  echo "wan.sh: needs root and /dev/net/tun (network namespaces + TUN)" >&2; exit 1
fi
PY=${STRATA_PYTHON:-/usr/bin/python3}
base_link=rate=1gbit,delay=25ms
links=${WAN_LINKS:-clean:$base_link loss0.01:$base_link,loss=0.01% loss0.1:$base_link,loss=0.1%}
size=${WAN_SIZE:-256M}
variants=${WAN_STRATA_VARIANTS:-STRATA_TCP_GOVERN=0 STRATA_TCP_STREAMS=8,STRATA_TCP_CC=cubic STRATA_TCP_STREAMS=8,STRATA_TCP_CC=bbr}
repeat=${WAN_REPEAT:-1}
iters=${WAN_ITERS:-3}
peer_iters=${WAN_PEER_ITERS:-2}
warmup=${WAN_WARMUP:-3}
strata_args=${WAN_STRATA_ARGS:-} # more `strata bench` arguments, strata rows only (--compress int8)
peer_timeout=${WAN_PEER_TIMEOUT_S:-150}
tcp_mem=${WAN_TCP_MEM:-host}
name=wan$$
out=$here/results/wan-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
addr0=10.77.0.1
cleanup() { "$STRATA" netem down --name "$name" >/dev/null 2>&1; }
trap cleanup EXIT
trap 'exit 1' INT TERM # a trap that only cleaned up would let the script run on
note() { echo "# $*" >&2; }
port=$((21000 + RANDOM % 20000))

# snmp DIR LABEL WHEN: both sites' TCP counters into DIR/LABEL.rR.snmpWHEN
snmp() {
  for r in 0 1; do
    "$STRATA" netem exec --name "$name" "$r" -- cat /proc/net/snmp >"$1/$2.r$r.snmp$3" 2>/dev/null
  done
}

# run_strata DIR LABEL ENV...: 2 ranks, rank 0 hosts the store
run_strata() {
  local dir=$1 label=$2 status=0 rp=()
  shift 2
  port=$((port + 1))
  local common=(STRATA_WORLD_SIZE=2 STRATA_ADDR=$addr0:$port STRATA_SHM=0 STRATA_TIMEOUT=200 "$@")
  snmp "$dir" "$label" 0
  for r in 0 1; do
    timeout -k 2 240 "$STRATA" netem exec --name "$name" "$r" -- env STRATA_RANK=$r "${common[@]}" \
      "$STRATA" bench allreduce -b "$size" -e "$size" -n "$iters" -w "$warmup" $strata_args -J "$dir/$label.r$r.json" \
      >"$dir/$label.r$r.log" 2>&1 &
    rp+=($!)
  done
  for pid in "${rp[@]}"; do wait "$pid" || status=1; done
  snmp "$dir" "$label" 1
  mv "$dir/$label.r0.json" "$dir/$label.json" 2>/dev/null
  return $status
}

run_gloo() {
  local dir=$1 status=0 rp=()
  port=$((port + 1))
  for r in 0 1; do
    timeout -k 2 "$peer_timeout" "$STRATA" netem exec --name "$name" "$r" -- env RANK=$r \
      WORLD_SIZE=2 MASTER_ADDR=$addr0 MASTER_PORT=$port GLOO_SOCKET_IFNAME=netem0 \
      "$PY" "$here/gloo_allreduce.py" -b "$size" -e "$size" -n "$peer_iters" -w "$warmup" \
      -J "$dir/gloo.r$r.json" >"$dir/gloo.r$r.log" 2>&1 &
    rp+=($!)
  done
  for pid in "${rp[@]}"; do wait "$pid" || status=1; done
  mv "$dir/gloo.r0.json" "$dir/gloo.json" 2>/dev/null
  return $status
}

mpi_tool=$out/mpi_allreduce
mpicc -std=gnu11 -O2 "$here/mpi_allreduce.c" -o "$mpi_tool" >"$out/mpicc.log" 2>&1 || mpi_tool=
run_mpi() {
  local dir=$1
  [ -n "$mpi_tool" ] || return 1
  # mpirun in site 0; its PMIx server listens on netem0 so rank 1 (in site 1) reaches it.
  timeout -k 2 "$peer_timeout" "$STRATA" netem exec --name "$name" 0 -- env \
    PMIX_MCA_ptl_tcp_if_include=10.77.0.0/16 PMIX_MCA_ptl_tcp_remote_connections=1 \
    mpirun --allow-run-as-root --oversubscribe --bind-to none --mca pml ob1 --mca btl tcp,self \
    --mca btl_tcp_if_include 10.77.0.0/16 --mca oob_tcp_if_include 10.77.0.0/16 \
    -np 1 "$mpi_tool" -b "$size" -e "$size" -n "$peer_iters" -w "$warmup" -J "$dir/mpi.json" : \
    -np 1 ip netns exec "$name-s1" "$mpi_tool" -b "$size" -e "$size" -n "$peer_iters" \
    -w "$warmup" >"$dir/mpi.log" 2>&1
}

# What the emulated link delivers both ways at once on this host: iperf3 --bidir, 8 streams,
# the host's default congestion control, 8 s after 2 s of warm-up.
iperf_ref() {
  local dir=$1
  "$STRATA" netem exec --name "$name" 1 -- iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  timeout -k 2 30 "$STRATA" netem exec --name "$name" 0 -- iperf3 -c 10.77.1.1 -p 5201 -P 8 \
    --bidir -t 8 -O 2 -J >"$dir/iperf_bidir.json" 2>/dev/null
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
}

conditions=()
for entry in $links; do
  cond=${entry%%:*}
  spec=${entry#*:}
  dir=$out/$cond
  mkdir -p "$dir"
  echo "$spec" >"$dir/link.txt"
  note "[$cond] link 0-1: $spec, sites' TCP buffer maxima: $tcp_mem"
  "$STRATA" netem down --name "$name" >/dev/null 2>&1
  "$STRATA" netem up --name "$name" --sites 2 --lifetime 3600 --tcp-mem-max "$tcp_mem" \
    --link "0-1:$spec" >"$dir/netem_up.log" 2>&1 ||
    { cat "$dir/netem_up.log" >&2; echo "wan.sh: netem up failed" >&2; exit 1; }
  conditions+=("$cond")
  if command -v iperf3 >/dev/null; then
    note "[$cond] iperf3 --bidir -P 8 reference"
    iperf_ref "$dir"
    grep -q sum_received_bidir_reverse "$dir/iperf_bidir.json" 2>/dev/null || note "iperf3 failed"
  fi
  # repeats go round all rows, so a drift of the host's load touches every row alike
  for ((k = 1; k <= repeat; k++)); do
    tail=$([ "$repeat" -gt 1 ] && echo "~$k")
    note "[$cond] strata, no knobs ($k/$repeat)"
    run_strata "$dir" "strata$tail" || note "strata failed (see $dir/strata$tail.r*.log)"
    for v in $variants; do
      label=strata_${v//[=,]/_}$tail
      note "[$cond] strata $v ($k/$repeat)"
      run_strata "$dir" "$label" ${v//,/ } || note "$label failed (see $dir/$label.r*.log)"
    done
  done
  if [ "${WAN_SKIP_PEERS:-0}" != 1 ]; then
    note "[$cond] gloo (timeout $peer_timeout s)"
    run_gloo "$dir" || note "gloo failed or timed out (see $dir/gloo.r*.log)"
    note "[$cond] openmpi (timeout $peer_timeout s)"
    run_mpi "$dir" || note "openmpi failed or timed out (see $dir/mpi.log)"
  fi
  "$STRATA" netem status --name "$name" >"$dir/netem_status.txt" 2>&1
done

"$PY" - "$out" "$size" "$peer_timeout" "${WAN_SKIP_PEERS:-0}" "${conditions[@]}" <<'PY' | tee "$out/table.txt"
import glob, json, os, re, sys
out, size_text, timeout_s, skip_peers = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4] == "1"
conditions = sys.argv[5:]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
n = int(float(size_text[:-1]) * units[size_text[-1].upper()]) if size_text[-1].upper() in units else int(size_text)
def retx(d, label):
    """RetransSegs / OutSegs of both sites over one run (/proc/net/snmp before and after)."""
    sums = [0, 0]
    for r in (0, 1):
        try:
            before, after = (open(os.path.join(d, "%s.r%d.snmp%d" % (label, r, w))).read() for w in (0, 1))
        except OSError:
            return None
        for i, key in enumerate(("RetransSegs", "OutSegs")):
            vals = []
            for text in (before, after):
                lines = [l.split() for l in text.splitlines() if l.startswith("Tcp:")]
                vals.append(int(lines[1][lines[0].index(key)]))
            sums[i] += vals[1] - vals[0]
    return 100.0 * sums[0] / sums[1] if sums[1] else None
def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else (xs[len(xs) // 2 - 1] + xs[len(xs) // 2]) / 2
def time_s(path):
    try:
        j = json.load(open(path))
    except (OSError, ValueError):
        return None
    best = None
    for r in j.get("results", []):
        for k in ("out_of_place", "in_place"):
            f = r.get(k)
            if f and f.get("time") and not f.get("nwrong"):  # nccl-tests' keys; time in us
                t = f["time"] / 1e6
                best = t if best is None else min(best, t)
    return best
for cond in conditions:
    d = os.path.join(out, cond)
    spec = open(os.path.join(d, "link.txt")).read().strip()
    m = re.search(r"rate=([\d.]+)([kmg]?)bit", spec)
    rate_bps = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    t_min = n / (rate_bps / 8)
    print("\n## %s: %s; %d-byte float allreduce, 2 ranks; link bound t_min = N/R = %.3f s" % (cond, spec, n, t_min))
    practical = None
    try:
        ip = json.load(open(os.path.join(d, "iperf_bidir.json")))["end"]
        both = [ip["sum_received"]["bits_per_second"], ip["sum_received_bidir_reverse"]["bits_per_second"]]
        practical = n / (min(both) / 8)
        print("# iperf3 --bidir -P 8 on this link: %.0f / %.0f Mbit/s -> practical bound %.3f s "
              "(%.1f%% of the nominal)" % (both[0] / 1e6, both[1] / 1e6, practical, 100 * t_min / practical))
    except (OSError, ValueError, KeyError, ZeroDivisionError):
        pass
    runs = {}  # row -> the labels of its runs (one, or one per repeat: LABEL~K)
    for p in sorted(glob.glob(os.path.join(d, "strata*.r0.log"))):
        label = os.path.basename(p)[:-len(".r0.log")]
        runs.setdefault(label.split("~")[0], []).append(label)
    labels = sorted(runs, key=lambda l: (l != "strata", l))
    times, spread, retxs = {}, {}, {}
    for l in labels:
        ts = [t for t in (time_s(os.path.join(d, r + ".json")) for r in runs[l]) if t is not None]
        xs = [x for x in (retx(d, r) for r in runs[l]) if x is not None]
        times[l] = median(ts) if ts else None
        spread[l] = "%.2f-%.2f/%d" % (min(ts), max(ts), len(ts)) if len(runs[l]) > 1 and ts else ""
        retxs[l] = "%.2f%%" % median(xs) if xs else "-"
    for peer in ("gloo", "mpi"):
        times[peer] = time_s(os.path.join(d, peer + ".json"))
    def ratio(t, peer):
        if skip_peers or t is None: return "-"
        tp = times.get(peer)
        return "> %.1fx" % (timeout_s / t) if tp is None else "%.1fx" % (tp / t)
    if any(spread.values()):
        print("# strata rows: the median of the runs; range = fastest-slowest/runs")
    print("%-44s %9s %11s %8s %9s %9s %9s %7s %s" % ("run", "time_s", "busbw_MB/s", "%bound", "%practical", "vs_gloo", "vs_mpi", "retx%", "range"))
    rows = labels + ([] if skip_peers else ["gloo", "mpi"])
    for l in rows:
        t = times.get(l)
        if t is None:
            shown = ("> %.0f" % timeout_s) if l in ("gloo", "mpi") else "failed/timeout"
            print("%-44s %9s %11s %8s" % (l, shown, "-", "-"))
            continue
        pr = "%.1f%%" % (100 * practical / t) if practical else "-"
        strata = l.startswith("strata")
        print("%-44s %9.3f %11.1f %7.1f%% %9s %9s %9s %7s %s" % (l, t, n / t / 1e6, 100 * t_min / t, pr,
              ratio(t, "gloo") if strata else "", ratio(t, "mpi") if strata else "",
              retxs.get(l, "") if strata else "", spread.get(l, "") if strata else ""))
PY
