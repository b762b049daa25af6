#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/weights/run.sh — RL weight sync over 2 emulated sites (issue 30, point 6): 1 publisher
# and 3 subscribers, site 0 = publisher + subscriber 1, site 1 = subscribers 2 and 3, joined by
# `strata netem` at 1 Gbit/s and 25 ms each way (50 ms RTT). The weights are the update sequence
# bench/weights/sparsity.py measured, tiled to ~100M bf16 parameters; each version is sent once
# as patches (--mode patch) and once as full copies (--mode full). Needs root and /dev/net/tun.
#
#   bench/weights/run.sh [--seq DIR/lr1e-06] [--params 100e6] [--versions 10] [--out DIR]
#                        [--no-prepare]
#
# WEIGHTS_MODES (default "patch full") chooses and orders the modes; the results of both modes in
# OUT are cleared first, so the report never pairs this run with an older one.
# Every rank calls prepare() before the first version (bench.py), unless --no-prepare: then
# version 1 runs on connections TCP has not ramped up yet.
# Without --seq it first runs sparsity.py (lr 1e-6, 20 steps) into OUT/sequence. Prints the
# per-version table and the targets (bench/weights/report.py); exits non-zero on a failure.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=${BUILD:-$root/build}
strata=$build/strata
py=${STRATA_PYTHON:-/usr/bin/python3}
. "$here/../common.sh" # netem_up
seq="" params=100e6 versions=10 out=$root/bench/results/weights prepare=""
while [ $# -gt 0 ]; do
  case $1 in
    --seq) seq=$2; shift 2 ;;
    --params) params=$2; shift 2 ;;
    --versions) versions=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --no-prepare) prepare=--no-prepare; shift ;;
    *) echo "weights: unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] && [ -c /dev/net/tun ] ||
  { echo "weights: needs root and /dev/net/tun (strata netem)" >&2; exit 1; }
[ -x "$strata" ] || { echo "weights: no $strata (make)" >&2; exit 1; }
mkdir -p "$out"
if [ -z "$seq" ]; then
  PYTHONPATH="$build/python" "$py" "$here/sparsity.py" --out "$out/sequence" --lr 1e-6 --steps 40
  seq=$out/sequence/lr1e-06
fi

netem_up wsync 3600 --sites 2 --ranks-per-site 2 \
  --link '*:rate=1gbit,delay=25ms'
echo "weights: 2 sites over strata netem ($name): 1 Gbit/s, 25 ms each way; results in $out"
# A round is a burst after seconds of idle (the publisher encodes between rounds): with CUBIC
# (STRATA_TCP_CC=cubic, or a system default other than BBR) Linux then restarts a connection
# from its initial window (net.ipv4.tcp_slow_start_after_idle), ~9 round trips before 8 MiB are
# in flight; BBR keeps its window whatever the setting. The sites here turn the restart off
# unless WEIGHTS_IDLE_RESTART=1 (a per-namespace setting: the host's own is untouched).
if [ "${WEIGHTS_IDLE_RESTART:-0}" != 1 ]; then
  for s in 0 1; do
    "$strata" netem exec --name "$name" "$s" -- sysctl -qw net.ipv4.tcp_slow_start_after_idle=0
  done
fi
site_cc=$("$strata" netem exec --name "$name" 0 -- sysctl -n net.ipv4.tcp_congestion_control |
  head -n 1)
echo "weights: tcp_slow_start_after_idle $("$strata" netem exec --name "$name" 0 -- \
  sysctl -n net.ipv4.tcp_slow_start_after_idle | head -n 1), congestion control" \
  "${STRATA_TCP_CC:-default ($site_cc at the sites; strata takes bbr on a WAN path if so)}"
# The emulator's first deep queue costs it page faults (its packet pool is touched as packets
# first queue up, docs/netem.md): a first full copy through a fresh emulator reached the last
# subscriber ~0.3 s later in 3 of 8 runs, whichever mode ran first, and never in the mode that
# ran second. So a few seconds of bulk traffic cross the link before anything is measured, as a
# benchmark warms its instrument.
"$strata" netem exec --name "$name" 1 -- iperf3 -s -1 -p 5201 >/dev/null 2>&1 &
pids+=($!)
sleep 0.5
timeout 20 "$strata" netem exec --name "$name" 0 -- iperf3 -c 10.77.1.1 -p 5201 -P 4 -t 3 \
  >/dev/null 2>&1 || echo "weights: the emulator's warm-up transfer failed (iperf3)" >&2
# the host is shared: the load average goes with the figures
echo "weights: load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$out/load.txt"

# CPU seconds the emulator's forwarder has used so far (utime + stime)
forwarder_cpu() {
  local pid
  pid=$(cat "/run/strata-netem/$name/pid" 2>/dev/null) || { echo nan; return; }
  awk -v tck="$(getconf CLK_TCK)" '{ printf "%.2f\n", ($14 + $15) / tck }' "/proc/$pid/stat" \
    2>/dev/null || echo nan
}

site_of=(0 0 1 1)
fails=0
rm -f "$out"/patch.*.json "$out"/full.*.json
for mode in ${WEIGHTS_MODES:-patch full}; do
  port=$((20000 + RANDOM % 20000))
  # the store in the publisher's site, as a trainer's launcher would run it
  timeout -k 5 1800 "$strata" netem exec --name "$name" 0 -- \
    "$strata" store --addr "10.77.0.1:$port" >"$out/$mode.store.log" 2>&1 &
  store=$!
  pids+=("$store")
  sleep 0.3
  children=()
  cpu_before=$(forwarder_cpu) wall_before=$(date +%s.%N)
  for r in 0 1 2 3; do
    s=${site_of[$r]}
    timeout -k 5 1800 "$strata" netem exec --name "$name" "$s" -- env PYTHONPATH="$build/python" \
      STRATA_ADDR="10.77.0.1:$port" STRATA_STORE_EXTERNAL=1 STRATA_RANK=$r STRATA_WORLD_SIZE=4 \
      STRATA_JOB_ID="$name-$mode" STRATA_SITE="site$s" STRATA_TIMEOUT=120 STRATA_TCP_LINK_GBPS=1 \
      "$py" "$here/bench.py" --seq "$seq" --params "$params" --versions "$versions" \
      --mode "$mode" --out "$out/$mode.RANK.json" $prepare >"$out/$mode.$r.log" 2>&1 &
    children+=($!)
    pids+=($!)
  done
  rc=0
  for pid in "${children[@]}"; do wait "$pid" || rc=1; done
  kill "$store" 2>/dev/null || true
  echo "{\"forwarder_cpu_s\": $(awk -v a="$cpu_before" -v b="$(forwarder_cpu)" \
    'BEGIN { print b - a }'), \"wall_s\": $(awk -v a="$wall_before" -v b="$(date +%s.%N)" \
    'BEGIN { print b - a }')}" >"$out/$mode.forwarder.json"
  if [ $rc -ne 0 ]; then
    echo "weights: mode $mode FAILED; the last lines of its ranks' logs:" >&2
    tail -n 5 "$out/$mode".[0-3].log >&2 || true
    fails=$((fails + 1))
  fi
done
echo "weights: load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
"$strata" netem status --name "$name" >"$out/netem.status" 2>&1 || true
"$py" "$here/report.py" "$out" || fails=$((fails + 1))
exit $((fails > 0))
