#!/usr/bin/env bash
# test_netem_rate.sh BUILD_DIR — `strata netem`: iperf3 (TCP) between emulated sites within 10%
# of the configured rate at 100 Mbit/s, 500 Mbit/s and 1 Gbit/s, and a per-direction rate
# (500 Mbit/s one way, 50 Mbit/s back) honoured in each direction. Goodput over IPv4+TCP with
# timestamps is at most 1448/1500 = 96.5% of the IP rate the emulator enforces.
# Needs root, /dev/net/tun, `ip netns` and iperf3; only namespaces it creates are touched.
set -u
build=${1:?usage: test_netem_rate.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "test_netem_rate: $strata is missing"; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ] || ! ip netns list >/dev/null 2>&1; then
  echo "SKIP test_netem_rate: needs root, /dev/net/tun and ip netns"; exit 0
fi
command -v iperf3 >/dev/null || { echo "FAIL: iperf3 is not installed (scripts/deps.sh test)"; exit 1; }
name=rate$$
failures=0
servers=()
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
cleanup() {
  for pid in "${servers[@]}"; do kill "$pid" 2>/dev/null; done
  "$strata" netem down --name "$name" >/dev/null 2>&1
}
trap cleanup EXIT
bounded() { timeout -k 2 40 "$@"; }
within() { awk -v v="$1" -v w="$2" -v p="$3" 'BEGIN { d = v - w; if (d < 0) d = -d; exit !(d <= w * p / 100) }'; }

bounded "$strata" netem up --name "$name" --sites 4 --lifetime 90 \
  --link 0-1:rate=100mbit,delay=10ms --link 0-2:rate=1gbit,delay=10ms \
  --link '0>3:rate=500mbit,delay=5ms' --link '3>0:rate=50mbit,delay=5ms' >/dev/null ||
  { echo "FAIL: netem up"; exit 1; }

port=5201
# 1 Gbit/s needs most of a core for the forwarder and another for iperf3 on this 2-core box:
# held to 10% when the host is otherwise idle (CI runs tests one at a time), to 20% when other
# work competes for the CPU (load average above the core count), and the reason is printed.
tolerance_1g=10
load=$(cut -d' ' -f1 /proc/loadavg)
if awk -v l="$load" -v n="$(nproc)" 'BEGIN { exit !(l > n) }'; then
  tolerance_1g=20
  echo "note: host busy (load $load on $(nproc) cores): 1 Gbit/s held to ±20%"
fi
measure() { # FROM TO WANT_MBIT [iperf3 client args...]: a miss is measured once more
  measure_once "$@" 2>/dev/null && return 0
  echo "(measuring $1 -> $2 ${4:-} again)"
  measure_once "$@" || fail "rate $1->$2 ${4:-}: missed twice"
}
measure_once() {
  local from=$1 to=$2 want=$3 out got tolerance=10
  shift 3
  port=$((port + 1))
  timeout -k 2 30 "$strata" netem exec --name "$name" "$to" -- iperf3 -s -1 -p "$port" >/dev/null 2>&1 &
  servers+=($!)
  sleep 0.3
  out=$(bounded "$strata" netem exec --name "$name" "$from" -- \
    iperf3 -c "10.77.$to.1" -p "$port" -t 3 -O 1 -f m "$@" 2>&1)
  got=$(echo "$out" | awk '/receiver/ { for (i = 1; i <= NF; i++) if ($i == "Mbits/sec") print $(i - 1) }')
  echo "iperf3 site $from -> site $to $*: ${got:-none} Mbit/s (configured $want)"
  [ "$want" = 1000 ] && tolerance=$tolerance_1g
  [ -n "$got" ] && within "$got" "$want" "$tolerance" && return 0
  echo "rate $from->$to $*: ${got:-none} Mbit/s, want $want ± $tolerance%"
  echo "$out" | tail -5
  return 1
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
