#!/usr/bin/env bash
# test_hier_netem.sh BUILD_DIR — the hierarchical allreduce beats the flat ring on emulated sites
# by the factor the α-β model predicts. bench/hier.sh runs 2 sites x 2 ranks joined by a
# 200 Mbit/s, 10 ms one-way link (`strata netem`), 16 MiB allreduce, STRATA_ALGO=ring against
# AUTO (which picks hier because STRATA_SITE names two sites). The model predicts 1.54x; the
# measured speedup must reach 30% of the predicted gain (>= 1 + 0.3 (predicted - 1), 1.16x) and
# stay below 1.5x the prediction (measured 2026-11-30 on the 2-core box: 1.41x idle, 1.30x with
# the test suite running beside it). One retry when a loaded host skews a run.
# Needs root, /dev/net/tun and `ip netns`; skips cleanly otherwise.
set -u
build=${1:?usage: test_hier_netem.sh BUILD_DIR}
[ -x "$build/strata" ] || { echo "test_hier_netem: $build/strata is missing"; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP test_hier_netem: needs root, /dev/net/tun and ip netns"; exit 0
fi
script=$(dirname "$0")/../bench/hier.sh
py=/usr/bin/python3
[ -x "$py" ] || py=python3
for attempt in 1 2; do
  echo "attempt $attempt (load $(cut -d' ' -f1 /proc/loadavg))"
  out=$(RATE=200mbit DELAY=10ms timeout -k 2 100 bash "$script" "$build" 16M 2 2>&1)
  echo "$out"
  line=$(echo "$out" | grep '^hier_ratio ') || { echo "FAIL: bench/hier.sh printed no ratio"; continue; }
  if "$py" - "$line" <<'PY'; then exit 0; fi
import re, sys
m = re.search(r"measured=([\d.]+) predicted=([\d.]+)", sys.argv[1])
measured, predicted = float(m.group(1)), float(m.group(2))
ok = 1 + 0.3 * (predicted - 1) <= measured <= 1.5 * predicted
print("hier faster by %.2fx, model %.2fx: %s" % (measured, predicted, "ok" if ok else "OFF"))
sys.exit(0 if ok else 1)
PY
done
echo "FAIL: hierarchical speedup off the model twice"
exit 1
