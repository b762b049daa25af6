#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/wan_all.sh [BUILD_DIR] — one command for every figure of issue 4 ("Across datacenters"),
# on emulated WAN links (`strata netem`, userspace TUN forwarder, docs/netem.md). Root only.
# Each part is its own script, runnable alone; this runs them in order, keeps their full output in
# bench/results/wan-all-DATE/, and ends with one summary of measured against configured or
# predicted figures:
#   1. the emulator: RTT within 5% of the configured delays, iperf3 within 10% of the configured
#      rate, loss near the configured rate          (tests/test_netem_{rtt,rate,loss}.sh)
#   2. WAN-grade TCP: 256 MiB allreduce over 1 Gb/s, 50 ms RTT — % of the link bound, strata
#      against Gloo and OpenMPI on the same link     (bench/wan.sh)
#   3. hierarchical against flat ring on 2 sites x 2 ranks, measured and model ratio
#                                                     (bench/hier.sh)
#   4. compression on the wire: time per encoding, measured against predicted, bytes saved
#                                                     (bench/wan_compress.sh)
#   5. `strata probe` recovers configured RTT (10%) and rate (15%)  (tests/test_probe_netem.sh)
#   6. `strata place`: placed ring against identity and random orders, margin measured against
#      the model's                                     (bench/place_netem.sh)
# WAN_ALL_SKIP="2 3" skips parts. Takes tens of minutes; the emulator shares the CPU with the
# ranks, so run it on a quiet machine.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
build=${1:-$root/build}
build=$(cd "$build" 2>/dev/null && pwd) || { echo "wan_all.sh: no build dir $1" >&2; exit 1; }
[ -x "$build/strata" ] || { echo "wan_all.sh: $build/strata is missing (make first)" >&2; exit 1; }
[ "$(id -u)" -eq 0 ] && [ -c /dev/net/tun ] ||
  { echo "wan_all.sh: needs root and /dev/net/tun" >&2; exit 1; }
out=$here/results/wan-all-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
skip=" ${WAN_ALL_SKIP:-} "
summary=()
status_all=0

part() { # NUMBER TITLE LOG CMD... — runs one part, keeps its output
  local num=$1 title=$2 log=$out/$3
  shift 3
  PART_LOG=/dev/null
  if [[ $skip == *" $num "* ]]; then
    summary+=("$num. $title: skipped")
    return
  fi
  echo "== $num. $title ($(date -u +%H:%M:%S), load $(cut -d' ' -f1 /proc/loadavg))"
  local start=$SECONDS rc=0
  bash "$@" >"$log" 2>&1 || rc=$?
  cat "$log"
  [ $rc -eq 0 ] || status_all=1
  summary+=("$num. $title: $([ $rc -eq 0 ] && echo ok || echo "FAILED (status $rc)") in $((SECONDS - start)) s")
  PART_LOG=$log
}

part 1 "emulator RTT" netem_rtt.log "$root/tests/test_netem_rtt.sh" "$build"
rtt_log=$PART_LOG
part 1 "emulator rate" netem_rate.log "$root/tests/test_netem_rate.sh" "$build"
rate_log=$PART_LOG
part 1 "emulator loss" netem_loss.log "$root/tests/test_netem_loss.sh" "$build"
loss_log=$PART_LOG
part 2 "WAN TCP vs Gloo and OpenMPI" wan.log "$here/wan.sh" "$build"
wan_log=$PART_LOG
part 3 "hierarchical vs flat" hier.log "$here/hier.sh" "$build" 256M 2
hier_log=$PART_LOG
part 4 "compression on the wire" compress.log "$here/wan_compress.sh" "$build"
cmp_log=$PART_LOG
part 5 "probe accuracy" probe.log "$root/tests/test_probe_netem.sh" "$build"
probe_log=$PART_LOG
part 6 "placement" place.log "$root/bench/place_netem.sh" "$build"
place_log=$PART_LOG

{
  echo
  echo "== summary (full output in $out)"
  for line in "${summary[@]}"; do echo "  $line"; done
  echo
  echo "  1. emulator (configured vs measured):"
  grep -hE "rtt|avg|Mbits|loss=|FAIL" "${rtt_log:-/dev/null}" "${rate_log:-/dev/null}" \
    "${loss_log:-/dev/null}" 2>/dev/null | grep -vE "^\s*$" | head -30 | sed 's/^/     /'
  echo "  2. WAN TCP (bound, % of bound, ratios):"
  grep -hE "^#|^strata|^gloo|^mpi|^run" "${wan_log:-/dev/null}" 2>/dev/null | sed 's/^/     /'
  echo "  3. hierarchical:"
  grep -hE "flat ring|hierarchical|hier_ratio" "${hier_log:-/dev/null}" 2>/dev/null | sed 's/^/     /'
  echo "  4. compression:"
  grep -hE "^# 2 sites|^wire|^none|^bf16|^f16|^int8|^fp8|^int4" "${cmp_log:-/dev/null}" 2>/dev/null |
    sed 's/^/     /'
  echo "  5. probe:"
  grep -hiE "rtt|rate|probe of|ok|FAIL" "${probe_log:-/dev/null}" 2>/dev/null | head -20 |
    sed 's/^/     /'
  echo "  6. placement:"
  grep -hiE "placed|identity|random|margin|FAIL|ok" "${place_log:-/dev/null}" 2>/dev/null |
    head -20 | sed 's/^/     /'
} | tee "$out/summary.txt"
exit $status_all
