#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_store_etcd_sites.sh BUILD_DIR — coordination that survives losing a host, across two
# `strata netem` sites (1 Gbit/s, 5 ms each way): a 3-member etcd cluster (two members in site 0,
# one in site 1) keeps the job's store (STRATA_STORE=etcd://...); 4 chaos workers
# (bench/chaos/worker.c: out-of-place allreduces checked exactly, agree, shrink on failure, grow
# every 10 steps), ranks 0 and 2 in site 0, 1 and 3 in site 1. Mid-training the etcd member every
# worker talks to is killed, then rank 0: the survivors must shrink through etcd and go on, and a
# replacement started in rank 0's site (STRATA_JOIN=1) must join at their next grow; 0 wrong
# results, no hang, no worker that gave up.
# Needs root, /dev/net/tun, `ip netns` and etcd (Debian: etcd-server); skipped (77) without them.
set -u
. "$(dirname "$0")/helpers/netem_prelude.sh"
netem_prelude test_store_etcd_sites etcds "${1:-}" etcd
worker=$build/strata-chaos-worker
[ -x "$worker" ] || { echo "SKIP test_store_etcd_sites: $worker is not built"; exit 77; }
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -9 "$pid" 2>/dev/null; done
  wait 2>/dev/null
  netem_down
  [ -n "${KEEP:-}" ] || [ "$failures" -ne 0 ] && echo "logs: $work" || rm -rf "$work"
}
trap cleanup EXIT

bounded "$strata" netem up --name "$name" --sites 2 --ranks-per-site 2 --lifetime 120 \
  --link "0-1:rate=1gbit,delay=5ms" >"$work/netem.log" 2>&1 ||
  { cat "$work/netem.log"; fail "netem up"; exit 1; }

# members: m0 and m2 in site 0, m1 in site 1; ports apart from anything the workers bind
base=$((21000 + RANDOM % 20000))
site_of=(0 1 0)
cluster=""
for m in 0 1 2; do
  cluster+="${cluster:+,}m$m=http://10.77.${site_of[$m]}.1:$((base + 10 + m))"
done
for m in 0 1 2; do
  s=${site_of[$m]} client=http://10.77.${site_of[$m]}.1:$((base + m))
  peer=http://10.77.$s.1:$((base + 10 + m))
  "$strata" netem exec --name "$name" "$s" -- etcd --name "m$m" --data-dir "$work/m$m" \
    --listen-client-urls "$client" --advertise-client-urls "$client" \
    --listen-peer-urls "$peer" --initial-advertise-peer-urls "$peer" \
    --initial-cluster "$cluster" --initial-cluster-token "$name" --initial-cluster-state new \
    --heartbeat-interval 50 --election-timeout 500 --logger zap --log-level error \
    >"$work/m$m.log" 2>&1 &
  pids+=($!)
done
store="etcd://10.77.0.1:$base,10.77.1.1:$((base + 1)),10.77.0.1:$((base + 2))"

# a leader answers a range (a linearizable read) through the JSON gateway
up=0
for _ in $(seq 1 100); do
  if "$strata" netem exec --name "$name" 1 -- bash -c "exec 3<>/dev/tcp/10.77.0.1/$base &&
      printf 'POST /v3/kv/range HTTP/1.1\r\nHost: m0\r\nContent-Length: 14\r\nConnection: close\r\n\r\n{\"key\":\"eA==\"}' >&3 &&
      timeout 2 cat <&3" 2>/dev/null | grep -q '"revision"'; then
    up=1
    break
  fi
  sleep 0.1
done
[ $up -eq 1 ] || { fail "the etcd cluster did not come up"; tail -5 "$work"/m*.log; exit 1; }

secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
# start_worker ID [ENV...]: worker ID in site ID % 2
start_worker() {
  local id=$1
  shift
  "$strata" netem exec --name "$name" $((id % 2)) -- env "$@" \
    STRATA_STORE="$store" STRATA_JOB_ID="etcd-sites-$$" STRATA_SECRET="$secret" STRATA_SHM=0 \
    STRATA_TIMEOUT=3 STRATA_SITE="site$((id % 2))" CHAOS_ID=$id CHAOS_LOG="$work/w$id.jsonl" \
    CHAOS_COUNT=16384 CHAOS_MAX_S=90 "$worker" 2>"$work/w$id.stderr" &
  pids+=($!)
}
for id in 0 1 2 3; do start_worker $id STRATA_RANK=$id STRATA_WORLD_SIZE=4; done

# the highest step worker id has completed ("op" lines), 0 before its first
step_of() {
  local s
  s=$(grep -o '"ev":"op","step":[0-9]*' "$work/w$1.jsonl" 2>/dev/null | tail -1 | grep -o '[0-9]*$')
  echo "${s:-0}"
}
# waits (at most 40 s) until every worker of the list "$2..." completed step $1
wait_step() {
  local want=$1 deadline=$((SECONDS + 40)) id low
  shift
  while [ $SECONDS -lt $deadline ]; do
    low=$want
    for id in "$@"; do
      s=$(step_of "$id")
      [ "${s:-0}" -lt "$low" ] && low=${s:-0}
    done
    [ "$low" -ge "$want" ] && return 0
    sleep 0.05
  done
  return 1
}
pid_of() { echo "${pids[$((3 + $1))]}"; } # netem exec and env exec the worker in place

t0=$SECONDS
wait_step 5 0 1 2 3 || { fail "the job did not reach step 5"; tail -3 "$work"/w*.stderr; exit 1; }
now() { date +%s.%N; }
since() { echo "$(now) $1" | awk '{printf "%.2f", $1 - $2}'; }
# etcd member m0: the first endpoint, the one every worker talks to
{ kill -9 "${pids[0]}"; wait "${pids[0]}"; } 2>/dev/null
t=$(now)
m0_step=$(step_of 0)
wait_step $((m0_step + 1)) 0 1 2 3 || fail "the job stalled after losing an etcd member"
m0_next=$(since "$t")
wait_step $((m0_step + 5)) 0 1 2 3 || fail "the job stalled after losing an etcd member"
{ kill -9 "$(pid_of 0)"; wait "$(pid_of 0)"; } 2>/dev/null
t=$(now)
r0_step=$(step_of 1)
wait_step $((r0_step + 1)) 1 2 3 || fail "the survivors did not go on after rank 0 died"
r0_next=$(since "$t")
wait_step $((r0_step + 5)) 1 2 3 || fail "the survivors did not go on after rank 0 died"
# a replacement in rank 0's site joins through etcd at the survivors' next grow
seen=$(wc -l <"$work/w1.jsonl")
start_worker 4 STRATA_JOIN=1
t=$(now)
joined=0
for _ in $(seq 1 400); do
  tail -n +$((seen + 1)) "$work/w1.jsonl" | grep -q '"ev":"op".*"size":4' && { joined=1; break; }
  sleep 0.05
done
join_s=$(since "$t")
[ $joined -eq 1 ] || fail "the replacement did not join"
wait_step $(($(step_of 1) + 3)) 1 2 3 4 || fail "the grown group did not go on"
for id in 1 2 3 4; do kill -TERM "$(pid_of $id)" 2>/dev/null; done
for i in 4 5 6 7; do wait "${pids[$i]}"; done 2>/dev/null
wrong=$(cat "$work"/w*.jsonl | grep -c '"ev":"wrong"')
hangs=$(cat "$work"/w*.jsonl | grep -c '"ev":"hang"')
gave_up=$(cat "$work"/w*.jsonl | grep -c '"ev":"gave_up"')
sizes=$(for id in 1 2 3 4; do grep '"ev":"op"' "$work/w$id.jsonl" | tail -1 | grep -o '"size":[0-9]*'; done | sort -u)
shrunk=$(grep -c '"ev":"op".*"size":3' "$work/w1.jsonl")
echo "etcd across 2 sites: member m0 killed at step $m0_step (every worker's next step" \
  "${m0_next} s later), rank 0 at step $r0_step (the survivors' next step ${r0_next} s later," \
  "$shrunk steps as 3), a replacement joined ${join_s} s after it started; step $(step_of 1)" \
  "reached ($sizes), $wrong wrong results, $hangs hangs, $((SECONDS - t0)) s"
[ "$wrong" -eq 0 ] || fail "$wrong wrong results"
[ "$hangs" -eq 0 ] || fail "$hangs hangs"
[ "$gave_up" -eq 0 ] || fail "a worker gave up"
[ "$shrunk" -ge 5 ] || fail "the survivors did only $shrunk steps as a group of 3"
[ "$sizes" = '"size":4' ] || fail "the last group was not of 4 ($sizes)"
for id in 1 2 3 4; do
  grep -q '"ev":"final","rc":0,' "$work/w$id.jsonl" || fail "worker $id did not end with rc 0"
done
exit $((failures != 0))
