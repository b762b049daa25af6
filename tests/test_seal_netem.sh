#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_seal_netem.sh BUILD_DIR — a bit flipped on the way between two hosts is caught: two
# `strata netem` sites, the forwarder flips one bit of the TCP payload crossing 0>1 after 4 MiB
# (link parameter flip=, checksum fixed so TCP delivers it as an on-path attacker's change
# would be). With the default STRATA_ENCRYPT=auto the pair is sealed (another host), so the
# 16 MiB allreduce fails on both ranks (the one that read the frame fails with the protocol error
# naming the integrity check and tells the other, which logs it), never
# with a wrong result. With STRATA_ENCRYPT=off the same flip is delivered and nothing in the
# transport can notice it: that is what sealing is for.
# Needs root, /dev/net/tun and `ip netns`; only namespaces it creates are touched.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_seal_netem seal "${1:-}"
work=$(mktemp -d)
cleanup() {
  netem_down
  [ -n "${KEEP:-}" ] && echo "logs: $work" || rm -rf "$work"
}
trap cleanup EXIT

# run_pair TAG [ENV...]: a fresh pair of sites with the flip, one 16 MiB allreduce, logs in
# $work/TAG.{0,1}.log, the forwarder's status in $work/TAG.status; returns 0 if both ranks passed
run_pair() {
  local tag=$1 port=$((20000 + RANDOM % 20000)) rc=0 rp=()
  shift
  netem_down
  timeout -k 2 30 "$strata" netem up --name "$name" --sites 2 --lifetime 120 \
    --link "0-1:rate=1gbit,delay=1ms" --link "0>1:rate=1gbit,delay=1ms,flip=4mb" \
    >"$work/$tag.netem" 2>&1 || { cat "$work/$tag.netem"; fail "netem up"; return 2; }
  for r in 0 1; do
    timeout -k 2 60 "$strata" netem exec --name "$name" $r -- env STRATA_RANK=$r \
      STRATA_WORLD_SIZE=2 STRATA_ADDR=10.77.0.1:$port STRATA_SHM=0 STRATA_TIMEOUT=10 \
      STRATA_SECRET=seal-test STRATA_LOG=info "$@" \
      "$strata" bench allreduce -b 16M -e 16M -n 1 -w 0 >"$work/$tag.$r.log" 2>&1 &
    rp+=($!)
  done
  for pid in "${rp[@]}"; do wait "$pid" || rc=1; done
  "$strata" netem status --name "$name" >"$work/$tag.status" 2>&1
  return $rc
}

if run_pair sealed; then
  fail "the sealed allreduce succeeded although a bit was flipped"
fi
grep -q " link 0>1 .*flipped=1" "$work/sealed.status" || fail "the forwarder flipped nothing"
for r in 0 1; do
  grep -q "sealed with" "$work/sealed.$r.log" || fail "rank $r: the pair was not sealed"
done
n=$(grep -l "integrity check failed" "$work"/sealed.[01].log | wc -l)
echo "sealed: $n of 2 ranks report: $(grep -h -m1 -o 'integrity check failed[^(]*' "$work"/sealed.[01].log | head -1)"
[ "$n" -ge 1 ] || { fail "no rank reported the integrity failure"; tail -5 "$work"/sealed.[01].log; }
for r in 0 1; do
  # both ends learn the cause: the reader fails with the protocol error and tells the sender,
  # which logs that its peer aborted with it (its own call may end first with the lost peer)
  grep -q "failed: protocol error\|aborted: STRATA_ERR_PROTOCOL" "$work/sealed.$r.log" ||
    { fail "rank $r never learned of the protocol error"; tail -5 "$work/sealed.$r.log"; }
  grep -Eq "^ +[0-9]+ .* [1-9][0-9]* *$" "$work/sealed.$r.log" &&
    fail "rank $r reported wrong results instead of failing"
done

run_pair clear STRATA_ENCRYPT=off
clear_rc=$?
grep -q " link 0>1 .*flipped=1" "$work/clear.status" || fail "the forwarder flipped nothing in clear"
grep -q "integrity check failed" "$work"/clear.[01].log &&
  fail "an unsealed pair reported an integrity failure"
echo "clear: the same flip was delivered and the transport could not tell (run status $clear_rc;" \
  "the benchmark checks only its validation pass)"

[ "$failures" -eq 0 ] && echo "test_seal_netem: ok" || echo "test_seal_netem: $failures failure(s)"
[ "$failures" -eq 0 ]
