#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_netem_rate.sh BUILD_DIR — `strata netem`: iperf3 (TCP) between emulated sites at the
# configured rate (bounds in measure) at 100 Mbit/s, 500 Mbit/s and 1 Gbit/s, and a per-direction rate
# (500 Mbit/s one way, 50 Mbit/s back) honoured in each direction. Goodput over IPv4+TCP with
# timestamps is at most 1448/1500 = 96.5% of the IP rate the emulator enforces.
# Needs root, /dev/net/tun, `ip netns` and iperf3; only namespaces it creates are touched.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_netem_rate rate "${1:-}" iperf3
servers=()
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null; done
  netem_down
}
trap cleanup EXIT

bounded "$strata" netem up --name "$name" --sites 4 --lifetime 90 \
  --link 0-1:rate=100mbit,delay=10ms --link 0-2:rate=1gbit,delay=10ms \
  --link '0>3:rate=500mbit,delay=5ms' --link '3>0:rate=50mbit,delay=5ms' >/dev/null ||
  { echo "FAIL: netem up"; exit 1; }

port=5201
# One iperf3 run per link, judged in terms a loaded host cannot break: the emulator never lets
# more through than the configured rate (at most 10% over, iperf3's own reading error), and a
# busy host (the forwarder and iperf3 share the 2 cores with whatever else runs; 1 Gbit/s takes
# most of a core for the forwarder alone) can only take rate away: at least 70% of the configured
# rate, 60% at 1 Gbit/s. A rate not applied, or applied twice, or to the other direction, fails.
measure() { # FROM TO WANT_MBIT [iperf3 client args...]
  local from=$1 to=$2 want=$3 out got floor=70
  shift 3
  [ "$want" -ge 1000 ] && floor=60
  port=$((port + 1))
  timeout -k 2 30 "$strata" netem exec --name "$name" "$to" -- iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  servers+=($!)
  sleep 0.3
  out=$(bounded "$strata" netem exec --name "$name" "$from" -- \
    iperf3 -c "10.77.$to.1" -p "$port" -t 3 -O 1 -f m "$@" 2>&1)
  got=$(echo "$out" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") print $(i - 1) }')
  echo "iperf3 site $from -> site $to $*: ${got:-none} Mbit/s (configured $want, load $(cut -d' ' -f1 /proc/loadavg))"
  if [ -z "$got" ] || ! awk -v g="$got" -v w="$want" -v f="$floor" 'BEGIN { exit !(g >= w * f / 100 && g <= w * 1.10) }'; then
    fail "rate $from->$to $*: ${got:-none} Mbit/s, want $want (-$floor%/+10%)"
    echo "$out" | tail -5
  fi
}
measure 0 1 100
measure 0 2 1000
measure 0 3 500
measure 0 3 50 -R

"$strata" netem status --name "$name" | grep "dropped_queue"
"$strata" netem down --name "$name" >/dev/null || fail "down"
ip netns list | grep -q "^$name-" && fail "namespaces left"
[ "$failures" -eq 0 ] && echo "test_netem_rate: ok" || echo "test_netem_rate: $failures failure(s)"
[ "$failures" -eq 0 ]
