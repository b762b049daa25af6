#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_netem_loss.sh BUILD_DIR — `strata netem`: random loss near the configured rate (5% and 1%,
# set on one direction only, measured with thousands of pings), the other direction untouched
# (per-direction counters of the forwarder), and reordering counted when asked for.
# Needs root, /dev/net/tun and `ip netns`; only namespaces it creates are touched.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_netem_loss loss "${1:-}"
field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p"; }
between() { awk -v v="$1" -v lo="$2" -v hi="$3" 'BEGIN { exit !(v >= lo && v <= hi) }'; }
stat_of() { # LINK FIELD: a forwarder counter from `status`
  "$strata" netem status --name "$name" | grep " link $1 packets_in" | field "$2"
}

bounded "$strata" netem up --name "$name" --sites 4 --seed 42 --lifetime 60 \
  --link '0>1:delay=1ms,loss=5%' --link '1>0:delay=1ms' \
  --link '0>2:delay=1ms,loss=1%' --link '2>0:delay=1ms' \
  --link 0-3:delay=1ms,jitter=200us,reorder=20%,reorder_gap=3ms >/dev/null ||
  { echo "FAIL: netem up"; exit 1; }

# 5%: 4000 probes, σ ≈ 0.34%: accept 3.6%..6.4% (about 4σ).
out=$(bounded "$strata" netem ping --name "$name" 0 1 -c 4000 -i 0.0005 -W 1 -q); echo "$out"
loss=$(echo "$out" | field loss)
between "${loss:-x}" 3.6 6.4 || fail "loss 0>1: ${loss:-none}%, want about 5%"
# 1%: 6000 probes, σ ≈ 0.13%: accept 0.5%..1.5%.
out=$(bounded "$strata" netem ping --name "$name" 0 2 -c 6000 -i 0.0005 -W 1 -q); echo "$out"
loss=$(echo "$out" | field loss)
between "${loss:-x}" 0.5 1.5 || fail "loss 0>2: ${loss:-none}%, want about 1%"

# The same 1% seen one way only (UDP, `netem owd`), and nothing lost the other way.
out=$(bounded "$strata" netem owd --name "$name" 0 2 -c 6000 -i 0.0005 -W 1 -q); echo "$out"
loss=$(echo "$out" | field loss)
between "${loss:-x}" 0.5 1.5 || fail "one-way loss 0>2: ${loss:-none}%, want about 1%"
out=$(bounded "$strata" netem owd --name "$name" 2 0 -c 2000 -i 0.0005 -W 1 -q); echo "$out"
echo "$out" | grep -q " loss=0.000%" || fail "one-way loss on the lossless 2>0: $out"

# Only the configured direction lost packets.
[ "$(stat_of '0>1' dropped_loss)" -gt 0 ] 2>/dev/null || fail "no drops counted on 0>1"
[ "$(stat_of '1>0' dropped_loss)" = 0 ] || fail "drops on the lossless 1>0: $(stat_of '1>0' dropped_loss)"
[ "$(stat_of '2>0' dropped_loss)" = 0 ] || fail "drops on the lossless 2>0"

# Reordering: about 20% of the probes are held back; none is lost.
out=$(bounded "$strata" netem ping --name "$name" 0 3 -c 500 -i 0.0005 -W 1 -q); echo "$out"
echo "$out" | grep -q " loss=0.000%" || fail "reordering lost packets: $out"
held=$(stat_of '0>3' reordered)
between "${held:-0}" 60 140 || fail "reordered on 0>3: ${held:-none} of 500, want about 100"

"$strata" netem down --name "$name" >/dev/null || fail "down"
ip netns list | grep -q "^$name-" && fail "namespaces left"
[ "$failures" -eq 0 ] && echo "test_netem_loss: ok" || echo "test_netem_loss: $failures failure(s)"
[ "$failures" -eq 0 ]
