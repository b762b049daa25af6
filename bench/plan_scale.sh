#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# plan_scale.sh [BUILD_DIR] — how long, and how much memory, planning 100,000 GPUs on 4 sites
# takes (bench/plan_scale.yaml: 12,500 DGX H100, MetroX, DWDM and WireGuard links). The claim:
# under 1 s and under 1 GiB, for text, JSON and SVG output alike. A benchmark, not a test: it
# prints the figures and says whether the claim holds; exit 1 if it does not.
set -uo pipefail
build=${1:-build}
here=$(cd "$(dirname "$0")" && pwd)
bin="$build/strata"
topo="$here/plan_scale.yaml"
[ -x "$bin" ] || { echo "plan_scale: no $bin (build first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "plan_scale: needs /usr/bin/time (apt-get install time)" >&2; exit 2; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
ok=0
printf '%-22s %10s %12s\n' "output" "wall (s)" "max RSS (MB)"
for mode in text json svg; do
  args=()
  [ "$mode" = json ] && args=(--json)
  [ "$mode" = svg ] && args=(--svg "$tmp/map.svg")
  best_s=""; rss_kb=0
  for run in 1 2 3; do
    /usr/bin/time -f "%e %M" -o "$tmp/time" "$bin" plan "$topo" "${args[@]}" >"$tmp/out" || { echo "plan failed" >&2; exit 1; }
    read -r s kb <"$tmp/time"
    if [ -z "$best_s" ] || awk "BEGIN{exit !($s < $best_s)}"; then best_s=$s; fi
    [ "$kb" -gt "$rss_kb" ] && rss_kb=$kb
  done
  printf '%-22s %10s %12.1f\n' "plan ($mode)" "$best_s" "$(awk "BEGIN{print $rss_kb/1024}")"
  awk "BEGIN{exit !($best_s < 1.0 && $rss_kb < 1048576)}" || ok=1
done
gpus=$(grep -o '"gpus": [0-9]*' <("$bin" plan "$topo" --json) | head -1 | awk '{print $2}')
echo "topology: $gpus GPUs, 4 sites"
if [ $ok -eq 0 ]; then echo "claim holds: under 1 s and 1 GiB"; else echo "claim FAILS"; fi
exit $ok
