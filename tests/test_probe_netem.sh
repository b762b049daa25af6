#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_probe_netem.sh BUILD_DIR — `strata probe` on emulated sites (`strata netem`, one rank per
# site, a standalone store in site 0) recovers every configured one-way delay and rate (bounds
# in check_matrix), and `strata place` reads the matrix.
# Needs root, /dev/net/tun and `ip netns`; only namespaces it creates are touched.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
NETEM_BOUND_S=90
netem_prelude test_probe_netem probe "${1:-}"
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  netem_down
  rm -rf "$work"
}
trap cleanup EXIT
py=${STRATA_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3

# Three sites: delay is one way (RTT = 2 x delay), rate in both directions.
declare -A delay_ms=([0-1]=5 [0-2]=15 [1-2]=10)
declare -A rate_mbit=([0-1]=200 [0-2]=100 [1-2]=50)
links=()
for pair in 0-1 0-2 1-2; do links+=(--link "$pair:rate=${rate_mbit[$pair]}mbit,delay=${delay_ms[$pair]}ms"); done
bounded "$strata" netem up --name "$name" --sites 3 --lifetime 200 "${links[@]}" >/dev/null ||
  { echo "FAIL: netem up"; exit 1; }

# run_probe OUT ARGS...: store in site 0, rank s in site s
run_probe() {
  local out=$1 port=$((20000 + RANDOM % 20000))
  shift
  timeout -k 2 90 "$strata" netem exec --name "$name" 0 -- "$strata" store --addr "10.77.0.1:$port" >/dev/null 2>&1 &
  local store=$!
  pids+=($store)
  sleep 0.3
  local ranks=()
  for s in 0 1 2; do
    bounded "$strata" netem exec --name "$name" "$s" -- env STRATA_ADDR="10.77.0.1:$port" \
      STRATA_STORE_EXTERNAL=1 STRATA_RANK=$s STRATA_WORLD_SIZE=3 STRATA_JOB_ID="probe$$-$port" \
      STRATA_SITE="site$s" STRATA_TIMEOUT=60 "$strata" probe --out "$out" "$@" &
    ranks+=($!)
  done
  local rc=0
  for pid in "${ranks[@]}"; do wait "$pid" || rc=1; done
  kill "$store" 2>/dev/null
  return $rc
}

# check_matrix JSON: every pair's delay and rate near the configuration, in bounds a loaded host
# cannot break. A busy host (other tests on the 2 cores delaying the emulator's user-space
# forwarder and the ranks) can only add delay and take bandwidth away. So the delay is at least
# the configured one less 10%, at most 25% or 1 ms over; the rate at most 15% over (TCP goodput is
# at most 1448/1500 = 96.5% of the IP rate the emulator enforces) and at least 60% of it. A
# wrong measurement (a 2x error either way, the round trip read as the one-way delay) still fails.
check_matrix() {
  "$py" - "$(declare -p delay_ms rate_mbit)" "$@" <<'PY'
import json, re, sys
m = json.load(open(sys.argv[2]))
conf = dict(re.findall(r'\[(\d-\d)\]="?(\d+)"?', sys.argv[1].split("rate_mbit")[0]))
rate = dict(re.findall(r'\[(\d-\d)\]="?(\d+)"?', sys.argv[1].split("rate_mbit")[1]))
bad = 0
for pair, ms in conf.items():
    i, j = map(int, pair.split("-"))
    for a, b in ((i, j), (j, i)):
        lat = m["latency_us"][a][b]
        want = float(ms) * 1000
        gbps = m["bandwidth_gbps"][a][b]
        want_gbps = float(rate[pair]) / 8000
        ok_lat = -0.10 * want <= lat - want <= max(0.25 * want, 1000)
        ok_bw = 0.60 * want_gbps <= gbps <= 1.15 * want_gbps
        print("site %d -> %d: latency %.0f us (configured %.0f, %+.1f%%), bandwidth %.4f GB/s "
              "(configured %.4f, %+.1f%%)%s" % (a, b, lat, want, 100 * (lat - want) / want, gbps,
              want_gbps, 100 * (gbps - want_gbps) / want_gbps, "" if ok_lat and ok_bw else "  <-- off"))
        bad += not (ok_lat and ok_bw)
assert m["sites"] == ["site0", "site1", "site2"], m["sites"]
sys.exit(1 if bad else 0)
PY
}

start=$(date +%s)
if run_probe "$work/wan.json"; then
  echo "probe of 3 emulated sites: $(($(date +%s) - start)) s (load $(cut -d' ' -f1 /proc/loadavg))"
  check_matrix "$work/wan.json" || fail "matrix off the configuration"
  "$strata" place "$work/wan.json" || fail "place on the emulated matrix"
else
  fail "probe on emulated sites failed"
fi

[ "$failures" -eq 0 ] && echo "test_probe_netem: ok" || echo "test_probe_netem: $failures failure(s)"
[ "$failures" -eq 0 ]
