#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/flood.sh — what a crowd at a rank's data port costs the job (docs/security.md): runs
# tests/test_net_flood FLOOD_REPEAT times (default 9). Each run starts the same 2-rank job twice,
# unattacked and with 5,000 idle plus 1,000 garbage-sending connections held against rank 0's
# port while rank 1 connects (both ranks at a soft limit of 1,024 descriptors), and times the
# first 64 MiB allreduce of each (in alternating order, run by run). Prints the median attacked/unattacked speed ratio (1.00 = no
# cost; the claim is >= 0.80) with every run's figures; raw output in bench/results/.
# Environment: BUILD (default build), FLOOD_REPEAT.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
[[ $BUILD = /* ]] || BUILD=$root/$BUILD
test_bin=$BUILD/tests/test_net_flood
[ -x "$test_bin" ] || { echo "bench/flood.sh: $test_bin not found: build with tests first" >&2; exit 1; }
repeat=${FLOOD_REPEAT:-9}
out=$root/bench/results/flood-$(date -u +%Y-%m-%d_%H%M%S)
mkdir -p "$out"
for i in $(seq 1 "$repeat"); do
  order=$([ $((i % 2)) -eq 0 ] && echo --attacked-first || true)
  timeout -k 2 200 "$test_bin" $order >"$out/run-$i.log" 2>&1 || echo "run $i failed (see $out/run-$i.log)"
done
/usr/bin/python3 - "$out" "$repeat" <<'PY'
import re, statistics, sys
out, repeat = sys.argv[1], int(sys.argv[2])
ratios, starts = [], []
for i in range(1, repeat + 1):
    text = open(f"{out}/run-{i}.log").read()
    m = re.search(r"speed attacked / quiet: ([0-9.]+)", text)
    s = re.search(r"attacked: init ([0-9.]+) / ([0-9.]+) s", text)
    if m: ratios.append(float(m.group(1)))
    if s: starts.append(max(float(s.group(1)), float(s.group(2))))
    print(f"run {i}: ratio {m.group(1) if m else 'failed'}")
if ratios:
    print(f"| runs | median speed attacked/unattacked | lowest | slowest attacked start |")
    print(f"|---|---|---|---|")
    print(f"| {len(ratios)} of {repeat} | {statistics.median(ratios):.2f} | {min(ratios):.2f} | "
          f"{max(starts):.2f} s |")
PY
