#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_netem_rtt.sh BUILD_DIR — `strata netem`: round-trip times between emulated sites (their
# median) at the configured one-way delays (20 ms and 50 ms RTT), an asymmetric pair (10 ms one
# way, 30 ms back, each direction measured on its own with `netem owd`), jitter visible in the
# spread but not in the median, and the status report.
# Needs root, /dev/net/tun and `ip netns`; only namespaces it creates are touched.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_netem_rtt rtt "${1:-}"
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }

bounded "$strata" netem up --name "$name" --sites 4 --lifetime 90 \
  --link 0-1:delay=10ms --link 0-2:delay=25ms --link '1>2:delay=10ms' --link '2>1:delay=30ms' \
  --link 0-3:delay=20ms,jitter=2ms >/dev/null || { echo "FAIL: netem up"; exit 1; }

# Every check is one measurement, judged in terms a loaded host cannot break: a stall of the 2
# cores (other tests, sanitizer builds) delays the emulator's user-space forwarder and the probe
# alike, so it can only add delay, to a few samples. The median of many samples is judged: at
# least the configured delay less 5% (the emulator is never early), at most 15% + 1 ms over it
# (the forwarder's own scheduling delay on a busy host). A delay missing, doubled, or read as the
# round trip still fails.
median_ok() { [ -n "$1" ] && awk -v v="$1" -v w="$2" 'BEGIN { exit !(v >= w * 0.95 && v <= w * 1.15 + 1) }'; }
check_rtt() { # FROM TO WANT_MS
  local out med
  out=$(bounded "$strata" netem ping --name "$name" "$1" "$2" -c 40 -i 0.03 -q)
  med=$(echo "$out" | field median)
  echo "$out"
  median_ok "$med" "$3" || fail "rtt $1->$2 median ${med:-none} ms, want $3 ms -5%/+(15% + 1 ms)"
  echo "$out" | grep -q " loss=0.000%" || fail "rtt $1->$2: lost packets on a lossless link"
}
check_rtt 0 1 20
check_rtt 1 0 20
check_rtt 0 2 50
check_rtt 1 2 40
check_rtt 2 1 40

# One-way delays of the asymmetric pair, each on its own.
check_owd() { # FROM TO WANT_MS
  local out med
  out=$(bounded "$strata" netem owd --name "$name" "$1" "$2" -c 60 -i 0.02 -q)
  med=$(echo "$out" | field median)
  echo "$out"
  median_ok "$med" "$3" || fail "one-way $1->$2 median ${med:-none} ms, want $3 ms -5%/+(15% + 1 ms)"
}
check_owd 1 2 10
check_owd 2 1 30
check_owd 0 1 10

# Jitter of σ = 2 ms each way on 0-3: the round trip spreads (σ about 2.8 ms, so 60 samples span
# well over 5 ms; a link without jitter spans under 1 ms on a quiet host), and the median stays
# the configured 40 ms. A busy host can only widen the spread: the check cannot fail from load.
out=$(bounded "$strata" netem ping --name "$name" 0 3 -c 60 -i 0.03 -q)
echo "$out"
med=$(echo "$out" | field median)
spread=$(awk -v lo="$(echo "$out" | field min)" -v hi="$(echo "$out" | field max)" \
  'BEGIN { if (lo == "" || hi == "") print ""; else print hi - lo }')
median_ok "$med" 40 || fail "jitter: rtt 0->3 median ${med:-none} ms, want 40 ms -5%/+(15% + 1 ms)"
awk -v s="${spread:-0}" 'BEGIN { exit !(s >= 3) }' || fail "jitter: rtt 0->3 spans ${spread:-none} ms, want >= 3"

status=$("$strata" netem status --name "$name") || fail "status says the forwarder is not running"
echo "$status" | grep -q "link 1>2 rate=unlimited,delay=10ms" || fail "status lacks link 1>2: $status"
echo "$status" | grep -q "link 2>1 rate=unlimited,delay=30ms" || fail "status lacks link 2>1"
echo "$status" | grep -Eq "link 0>1 packets_in=[1-9]" || fail "status lacks the forwarder's counters"

"$strata" netem down --name "$name" >/dev/null || fail "down"
ip netns list | grep -q "^$name-" && fail "namespaces left: $(ip netns list | grep "^$name-")"
[ "$failures" -eq 0 ] && echo "test_netem_rtt: ok" || echo "test_netem_rtt: $failures failure(s)"
[ "$failures" -eq 0 ]
