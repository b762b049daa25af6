#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# thawed_decider.sh [BUILD_DIR] [ONE_WAY_DELAY] — a reproduction for the library's owners
# (bench/chaos/README.md, "Findings"). Root, /dev/net/tun.
#
# Two `strata netem` sites, ONE_WAY_DELAY (default 1ms) between them; the store and worker 0 in
# site 0, workers 1 and 2 in site 1 (bench/chaos/worker.c: allreduce, agree, shrink on failure).
# Worker 0 is frozen (SIGSTOP) for 3 s with STRATA_TIMEOUT=1, then thawed.
# Expected: workers 1 and 2 shrink to a group of two about 1 s into the freeze and go on; worker
# 0, thawed, gets STRATA_ERR_EXCLUDED.
# What the harness saw: workers 1 and 2 cannot decide their agreement (every store read they make
# waits less than one round trip to the store: elastic.c reads contributions with a 0.5 ms
# timeout and polls the decision with 5 ms ones), so they wait; the thawed worker 0 decides, with
# its own failure detector, which takes them for dead (they closed their connections to it): it
# goes on alone and the live workers 1 and 2 are told STRATA_ERR_EXCLUDED.
# With ONE_WAY_DELAY=5ms not even the first agreement completes on site 1 (a hang).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../../../build}
delay=${2:-1ms}
name=thaw$$
work=$(mktemp -d)
trap '"$build/strata" netem down --name $name >/dev/null 2>&1; kill $(jobs -p) 2>/dev/null; wait' EXIT
cc -std=c11 -O2 -I "$here/../../../include" "$here/../worker.c" -o "$work/worker" -L "$build" \
  -lstrata -Wl,-rpath,"$(cd "$build" && pwd)" -lpthread || exit 2
"$build/strata" netem up --name $name --sites 2 --link "0-1:delay=$delay" --lifetime 120 || exit 77
port=29$((RANDOM % 900 + 100))
"$build/strata" netem exec --name $name 0 -- "$build/strata" store --addr 10.77.0.1:$port \
  >"$work/store.log" 2>&1 &
sleep 0.5
export STRATA_ADDR=10.77.0.1:$port STRATA_STORE_EXTERNAL=1 STRATA_JOB_ID=thaw STRATA_SECRET=x \
  STRATA_TIMEOUT=1 STRATA_WORLD_SIZE=3 CHAOS_GROW_EVERY=1000000
for id in 0 1 2; do
  site=$((id == 0 ? 0 : 1))
  CHAOS_ID=$id STRATA_RANK=$id CHAOS_LOG="$work/w$id.jsonl" \
    "$build/strata" netem exec --name $name $site -- "$work/worker" 2>"$work/w$id.stderr" &
  eval "pid$id=$!"
done
sleep 2
kill -STOP "$pid0"
sleep 3
kill -CONT "$pid0"
sleep 4
kill -TERM "$pid0" "$pid1" "$pid2" 2>/dev/null
sleep 2
for id in 0 1 2; do
  echo "== worker $id"
  grep -v '"ev":"op"' "$work/w$id.jsonl" | grep -v '"ev":"resources"'
  echo "   ops: $(grep -c '"ev":"op"' "$work/w$id.jsonl")"
done
echo "logs: $work"
