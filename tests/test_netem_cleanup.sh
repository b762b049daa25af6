#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_netem_cleanup.sh BUILD_DIR — `strata netem` and scripts/netem_harness.sh: a job of 3 sites
# × 2 ranks over the emulated WAN; `exec` puts a command in its site; nothing is left behind
# (namespaces, state, forwarder) after `down`, after a SIGKILLed forwarder, after --lifetime, or
# after the harness; `down` is idempotent; the host's own interfaces and addresses are untouched;
# bad input is refused with status 2 and a message. Needs root, /dev/net/tun and `ip netns`.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_netem_cleanup cln "${1:-}"
src=${STRATA_SOURCE_DIR:-$(cd "$(dirname "$0")/.." && pwd)}
left_behind() { # nothing of NAME may remain
  ip netns list | grep -q "^$1-" && return 0
  [ -e "/run/strata-netem/$1" ] && return 0
  return 1
}
host_links() { ip -o link show | sed 's/ qlen.*//' | awk '{print $2}' | sort; ip -o addr show | awk '{print $2, $4}' | sort; }
before=$(host_links)

# --- 1. exec: the command runs in its site, with its address and its arguments as given ---
bounded "$strata" netem up --name "$name" --sites 3 --ranks-per-site 2 --lifetime 60 \
  --link '*:delay=2ms' --cc reno --tcp-mem-max 48m >/dev/null || fail "up"
out=$(bounded "$strata" netem exec --name "$name" 1 -- cat /proc/sys/net/ipv4/tcp_congestion_control /proc/sys/net/ipv4/tcp_wmem)
echo "$out" | grep -q "^reno$" || fail "--cc reno not applied in the site: $out"
echo "$out" | grep -q "50331648$" || fail "--tcp-mem-max 48m not applied in the site: $out"
out=$(bounded "$strata" netem exec --name "$name" 2 -- sh -c 'echo "$STRATA_NETEM_SITE $STRATA_HOST"; ip -o -4 addr show dev netem0')
echo "$out" | grep -q "^2 10.77.2.1$" || fail "exec environment: $out"
echo "$out" | grep -q "inet 10.77.2.1/16" || fail "exec is not in site 2: $out"
out=$(bounded "$strata" netem exec --name "$name" 0 -- sh -c 'echo "$#:$*"' sh --out a --flag)
[ "$out" = "3:--out a --flag" ] || fail "exec did not pass its arguments as given: $out"
[ "$(ip netns list | grep -c "^$name-s")" = 3 ] || fail "expected 3 namespaces: $(ip netns list)"
bounded "$strata" netem up --name "$name" --sites 2 >/dev/null 2>&1 && fail "a second up with the same name succeeded"
bounded "$strata" netem down --name "$name" >/dev/null || fail "down"
left_behind "$name" && fail "left behind after down: $(ip netns list | grep "^$name-")"
pgrep -f "netem up --name $name " >/dev/null && fail "forwarder still running after down"
out=$(bounded "$strata" netem down --name "$name") || fail "second down failed"
echo "$out" | grep -q "no forwarder running, 0 namespaces removed" || fail "second down: $out"

# --- 2. a SIGKILLed forwarder: status says so, down still removes everything ---
bounded "$strata" netem up --name "$name" --sites 2 --lifetime 60 >/dev/null || fail "up (2)"
pid=$(cat "/run/strata-netem/$name/pid")
kill -KILL "$pid"; sleep 0.2
bounded "$strata" netem status --name "$name" >/dev/null && fail "status exits 0 with a dead forwarder"
bounded "$strata" netem down --name "$name" >/dev/null || fail "down after crash"
left_behind "$name" && fail "left behind after a crash and down"

# --- 3. --lifetime: the forwarder removes everything by itself ---
bounded "$strata" netem up --name "$name" --sites 2 --lifetime 1 >/dev/null || fail "up (3)"
for _ in $(seq 50); do left_behind "$name" || break; sleep 0.1; done
left_behind "$name" && fail "left behind after --lifetime 1"

# --- 4. the harness: 3 sites × 2 ranks run one allreduce job across the WAN, then vanish ---
out=$(STRATA_BIN=$strata bounded bash "$src/scripts/netem_harness.sh" --name "${name}h" --sites 3 \
  --ranks-per-site 2 --link '*:rate=200mbit,delay=3ms' --timeout 30 -- \
  "$strata" bench allreduce -b 4K -e 256K -f 8 -n 3 -w 1 2>&1)
rc=$?
[ "$rc" = 0 ] || fail "harness job failed ($rc): $(echo "$out" | tail -5)"
echo "$out" | grep -q "Out of bounds values : 0 OK" || fail "harness job: wrong results: $(echo "$out" | tail -5)"
[ "$(echo "$out" | grep -c "^#  Rank ")" = 6 ] || fail "harness job did not have 6 ranks"
left_behind "${name}h" && fail "the harness left things behind"
out=$(STRATA_BIN=$strata bounded bash "$src/scripts/netem_harness.sh" --name "${name}h" --sites 2 \
  --timeout 10 -- sh -c 'exit $((STRATA_RANK + 3))' 2>&1)
rc=$?
[ "$rc" = 3 ] || [ "$rc" = 4 ] || fail "harness status $rc, want a failing rank's (3 or 4)"
left_behind "${name}h" && fail "the harness left things behind after a failing rank"

# --- 5. bad input: status 2 and a message, nothing created ---
expect_usage() { # DESCRIPTION ARGS...
  local what=$1 out rc
  shift
  out=$(bounded "$strata" netem "$@" 2>&1); rc=$?
  [ "$rc" = 2 ] && [ -n "$out" ] || fail "$what: status $rc, output '$out'"
}
expect_usage "one site" up --name "$name" --sites 1
expect_usage "site out of range" up --name "$name" --sites 2 --link 0-2:delay=1ms
expect_usage "delay without unit" up --name "$name" --sites 2 --link 0-1:delay=10
expect_usage "unknown parameter" up --name "$name" --sites 2 --link 0-1:latency=10ms
expect_usage "loss over 100%" up --name "$name" --sites 2 --link '0>1:loss=150%'
expect_usage "bad name" up --name 'bad/name' --sites 2
expect_usage "unknown verb" frobnicate
expect_usage "ping to itself" ping --name "$name" 1 1
left_behind "$name" && fail "bad input created something"
bounded "$strata" netem exec --name "$name" 0 -- true 2>/dev/null && fail "exec into a missing site succeeded"

after=$(host_links)
[ "$before" = "$after" ] || fail "the host's interfaces changed: $(diff <(echo "$before") <(echo "$after"))"
[ "$failures" -eq 0 ] && echo "test_netem_cleanup: ok" || echo "test_netem_cleanup: $failures failure(s)"
[ "$failures" -eq 0 ]
