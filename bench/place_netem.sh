#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/place_netem.sh [BUILD_DIR] — the whole loop on emulated sites: two sites joined by a
# 100 Mbit/s, 2 ms link (`strata netem`), six ranks interleaved between them (slot i in site
# i % 2, so the identity order crosses the WAN on every hop). `strata probe` measures, `strata
# place` orders, and a real ring allreduce (`strata bench`, STRATA_ALGO=ring) runs with the
# placed order, the identity order and random orders. The placed ring must beat each of them by
# the margin the model predicts (`strata place --evaluate`), within -25% / +50% (congested orders
# lose a little more to TCP sharing than the model's fair share). A benchmark, not a test: the
# margins are times measured while the emulator shares the CPU with the ranks, so run it on a
# quiet host; exit 1 if a margin is off. Needs root, /dev/net/tun and `ip netns`; only
# namespaces it creates are touched.
set -u
build=${1:-${BUILD:-build}}
strata=$build/strata
[ -x "$strata" ] || { echo "place_netem: $strata is missing"; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ] || ! ip netns list >/dev/null 2>&1; then
  echo "place_netem: needs root, /dev/net/tun and ip netns"; exit 2
fi
name=place$$
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
py=${STRATA_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
nranks=6
bytes=2M
bounded() { timeout -k 2 120 "$@"; }

bounded "$strata" netem up --name "$name" --sites 2 --lifetime 300 \
  --link 0-1:rate=100mbit,delay=2ms >/dev/null || { echo "FAIL: netem up"; exit 1; }

# run_slots ORDER CMD...: slot i runs in site i % 2 with rank ORDER[i] (what `strata launch
# --order` does on one host); a store in site 0.
run_slots() {
  local order=$1 port=$((20000 + RANDOM % 20000))
  shift
  IFS=, read -r -a ranks <<<"$order"
  timeout -k 2 120 "$strata" netem exec --name "$name" 0 -- "$strata" store --addr "10.77.0.1:$port" >/dev/null 2>&1 &
  local store=$!
  pids+=($store)
  sleep 0.3
  local children=() rc=0
  for ((i = 0; i < nranks; i++)); do
    bounded "$strata" netem exec --name "$name" $((i % 2)) -- env STRATA_ADDR="10.77.0.1:$port" \
      STRATA_STORE_EXTERNAL=1 STRATA_RANK="${ranks[$i]}" STRATA_WORLD_SIZE=$nranks \
      STRATA_JOB_ID="place$$-$port" STRATA_SITE="site$((i % 2))" STRATA_TIMEOUT=100 "$@" &
    children+=($!)
  done
  for pid in "${children[@]}"; do wait "$pid" || rc=1; done
  kill "$store" 2>/dev/null
  return $rc
}

identity=$(seq -s, 0 $((nranks - 1)))
start=$(date +%s)
run_slots "$identity" "$strata" probe --seconds 0.1 --pings 50 --out "$work/m.json" ||
  { echo "FAIL: probe"; exit 1; }
echo "probe of $nranks ranks on 2 emulated sites: $(($(date +%s) - start)) s"
"$strata" place "$work/m.json" --bytes $bytes || fail "place"
placed=$("$strata" place -q "$work/m.json" --bytes $bytes)

# measure ORDER: mean out-of-place ring allreduce time (us) of $bytes
measure() {
  rm -f "$work/b.json"
  STRATA_ALGO=ring run_slots "$1" "$strata" bench allreduce -b $bytes -e $bytes -n 3 -w 1 \
    -J "$work/b.json" >/dev/null 2>&1 || { echo "bench failed" >&2; echo 0; return; }
  "$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["results"][0]["out_of_place"]["time"])' "$work/b.json"
}
predict() { "$strata" place "$work/m.json" --bytes $bytes --evaluate "$1" --json |
  "$py" -c 'import json,sys; print(json.load(sys.stdin)["allreduce_us"])'; }

# compare_all: the placed order against the others; sets `off` to how many margins are off.
others=("$identity" $("$py" -c 'import random; r = random.Random(7)
for _ in range(2): l = list(range('$nranks')); r.shuffle(l); print(",".join(map(str, l)))'))
compare_all() {
  off=0
  t_placed=$(measure "$placed")
  p_placed=$(predict "$placed")
  echo "placed   $placed: measured $t_placed us, predicted $p_placed us"
  for order in "${others[@]}"; do
    t=$(measure "$order")
    p=$(predict "$order")
    "$py" - "$order" "$t" "$p" "$t_placed" "$p_placed" <<'PY' || off=$((off + 1))
import sys
order, t, p, tp, pp = sys.argv[1], *map(float, sys.argv[2:])
measured, predicted = t / tp, p / pp
# At least the predicted margin less 25%; more is allowed up to +50%, since orders that push
# several flows through one WAN link lose a little more to TCP sharing than the model's fair share.
ok = tp > 0 and 0.75 * predicted <= measured <= 1.5 * predicted
print("other    %s: measured %.0f us, predicted %.0f us; placed faster by %.2fx measured, %.2fx "
      "predicted%s" % (order, t, p, measured, predicted, "" if ok else "  <-- off"))
sys.exit(0 if ok else 1)
PY
  done
}

echo "comparison (load $(cut -d' ' -f1 /proc/loadavg) on $(nproc) cores)"
compare_all
[ "$off" -eq 0 ] || fail "$off margin(s) off the model"

[ "$failures" -eq 0 ] && echo "place_netem: ok" || echo "place_netem: $failures failure(s)"
[ "$failures" -eq 0 ]
