#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_netem_chunk.sh — a job across two emulated sites gets the WAN chunk although its pairs
# connect on demand: the pairs open at init (rank^1) are all inside a site here, so the chunk
# each rank proposes at init is a LAN one; once the communicator runs, an allreduce crosses the
# sites, the pairs across them measure the WAN round trip and the chunk agreed again is the WAN
# one (engine/comm.c: agree_wan_chunk). Checked from each rank's log, with a right sum.
#   tests/test_netem_chunk.sh BUILD_DIR
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_netem_chunk chunk "${1:-}"
work=$(mktemp -d)
cleanup() {
  netem_down
  [ -n "${KEEP:-}" ] && echo "logs: $work" || rm -rf "$work"
}
trap cleanup EXIT

bounded "$strata" netem up --name "$name" --sites 2 --ranks-per-site 2 --lifetime 120 \
  --link '0-1:rate=1gbit,delay=5ms' >"$work/netem.log" 2>&1 ||
  { cat "$work/netem.log"; fail "netem up"; exit 1; }
port=$((20000 + RANDOM % 20000))
pids=()
for r in 0 1 2 3; do
  site=$((r / 2)) # ranks 0, 1 in site 0 and 2, 3 in site 1: every rank^1 pair stays in its site
  bounded "$strata" netem exec --name "$name" $site -- env STRATA_RANK=$r STRATA_WORLD_SIZE=4 \
    STRATA_ADDR=10.77.0.1:$port STRATA_TIMEOUT=20 STRATA_SECRET=chunk-test STRATA_SITE=s$site \
    STRATA_LOG=info "$strata" bench allreduce -b 4M -e 4M -n 1 -w 0 >"$work/$r.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || fail "a rank failed: $(tail -3 "$work"/[0-3].log)"; done
for r in 0 1 2 3; do
  grep -q "2 sites: 's0' (2 ranks), 's1' (2 ranks)" "$work/$r.log" || fail "rank $r: no sites"
  grep -q "chunk [0-9]* B: a pair across sites measured a WAN round trip" "$work/$r.log" ||
    fail "rank $r kept its LAN chunk: $(grep -h 'chunk' "$work/$r.log" | head -2)"
done
grep -Eq "^ +4194304 +1048576 +float +sum .* 0 *$" "$work/0.log" ||
  fail "the sum is wrong or missing: $(grep -E '^ +4194304' "$work/0.log")"
[ "$failures" -eq 0 ] && echo "test_netem_chunk: ok ($(grep -ho 'chunk [0-9]* B' "$work/0.log" | head -1))"
exit $((failures != 0))
