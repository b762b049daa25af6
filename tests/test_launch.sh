#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_launch.sh BUILD_DIR — `strata launch` and `strata store` end to end: the environment each
# rank gets, --order and --tag, a failing rank's status propagated and the others stopped quickly,
# signals forwarded, SIGKILL after the grace period, no orphans (even when the launcher itself is
# SIGKILLed), usage errors; and the standalone store starting and stopping on a signal.
set -u
build=${1:?usage: test_launch.sh BUILD_DIR}
strata=$build/strata
[ -x "$strata" ] || { echo "test_launch: $strata is missing (build tools/*.c first)"; exit 1; }
work=$(mktemp -d)
failures=0
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
now_ms() { date +%s%3N; }
# Runs the rest of the line with a hard bound, so a broken launcher cannot hang the test.
bounded() { timeout -k 2 30 "$@"; }
# A process is alive when it exists and is not a zombie (init may reap orphans late).
alive() { kill -0 "$1" 2>/dev/null && [ "$(ps -o stat= -p "$1" 2>/dev/null | cut -c1)" != Z ]; }
wait_for_lines() { # FILE N: wait up to 10 s until FILE has N lines
  for _ in $(seq 100); do
    [ -f "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ] && return 0
    sleep 0.1
  done
  return 1
}

# --- 1. every rank's environment ---
bounded "$strata" launch -n 3 -- sh -c 'echo "$STRATA_RANK $STRATA_WORLD_SIZE $STRATA_LOCAL_RANK $STRATA_ADDR $STRATA_STORE_EXTERNAL $STRATA_JOB_ID ${#STRATA_SECRET}"' >"$work/env.txt"
rc=$?
[ $rc -eq 0 ] || fail "env run exited $rc"
[ "$(cut -d' ' -f1 "$work/env.txt" | sort | tr '\n' ' ')" = "0 1 2 " ] || fail "ranks: $(cat "$work/env.txt")"
[ "$(cut -d' ' -f2 "$work/env.txt" | sort -u)" = "3" ] || fail "world size"
awk '$1 != $3 { exit 1 }' "$work/env.txt" || fail "local rank differs from rank"
[ "$(cut -d' ' -f4-6 "$work/env.txt" | sort -u | wc -l)" = 1 ] || fail "ranks disagree on addr/job"
grep -Eq '^0 3 0 127\.0\.0\.1:[0-9]+ 1 launch-[0-9a-f]{16} 64$' "$work/env.txt" || fail "env: $(head -1 "$work/env.txt")"
# the store really listens at STRATA_ADDR while the ranks run
bounded "$strata" launch -n 1 -- bash -c 'exec 3<>/dev/tcp/${STRATA_ADDR%:*}/${STRATA_ADDR##*:}' || fail "store not reachable at STRATA_ADDR"
# caller's job id and secret are kept; launcher variables of the caller are replaced
out=$(STRATA_JOB_ID=mine STRATA_SECRET=abc STRATA_RANK=9 bounded "$strata" launch -n 1 -- sh -c 'echo $STRATA_JOB_ID $STRATA_SECRET $STRATA_RANK')
[ "$out" = "mine abc 0" ] || fail "kept variables: '$out'"
# two launches get different job ids
a=$(bounded "$strata" launch -n 1 -- sh -c 'echo $STRATA_JOB_ID')
b=$(bounded "$strata" launch -n 1 -- sh -c 'echo $STRATA_JOB_ID')
[ "$a" != "$b" ] || fail "job id not fresh"

# --- 1b. --bind: rank r of N on its share of the CPUs we may use; one rank never bound ---
# (Cpus_allowed_list of each rank's own process, against this shell's)
mine=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
expand_cpus() { # "0-2,5" -> "0 1 2 5", one per line
  tr ',' '\n' <<<"$1" | awk -F- '{for (c = $1; c <= (NF == 2 ? $2 : $1); c++) print c}'
}
ncpu=$(expand_cpus "$mine" | wc -l)
out=$(bounded "$strata" launch -n 1 -- sh -c 'awk "/^Cpus_allowed_list/ {print \$2}" /proc/$$/status')
[ "$out" = "$mine" ] || fail "-n 1: the rank was bound: $out vs $mine"
bounded "$strata" launch -n 2 --order 1,0 -- sh -c 'echo "$STRATA_RANK $(awk "/^Cpus_allowed_list/ {print \$2}" /proc/$$/status)"' >"$work/bind.txt" || fail "bind run"
if [ "$ncpu" -ge 2 ]; then
  set0=$(expand_cpus "$(awk '$1 == 0 {print $2}' "$work/bind.txt")")
  set1=$(expand_cpus "$(awk '$1 == 1 {print $2}' "$work/bind.txt")")
  [ -n "$set0" ] && [ -n "$set1" ] || fail "--bind default: a rank has no CPUs: $(cat "$work/bind.txt")"
  [ -z "$(comm -12 <(sort <<<"$set0") <(sort <<<"$set1"))" ] || fail "--bind: ranks share a CPU: $(cat "$work/bind.txt")"
  [ "$(printf '%s\n%s\n' "$set0" "$set1" | sort -n | tr '\n' ' ')" = "$(expand_cpus "$mine" | sort -n | tr '\n' ' ')" ] ||
    fail "--bind: the shares do not cover $mine: $(cat "$work/bind.txt")"
  [ "$(head -1 <<<"$set0")" = "$(expand_cpus "$mine" | head -1)" ] || fail "--bind: rank 0 does not start at the first CPU: $(cat "$work/bind.txt")"
fi
bounded "$strata" launch -n 2 --bind none -- sh -c 'awk "/^Cpus_allowed_list/ {print \$2}" /proc/$$/status' >"$work/nobind.txt" || fail "--bind none run"
[ "$(sort -u "$work/nobind.txt")" = "$mine" ] || fail "--bind none changed the CPUs: $(cat "$work/nobind.txt") vs $mine"
bounded "$strata" launch -n $((ncpu + 1)) --bind core -- sh -c 'awk "/^Cpus_allowed_list/ {print \$2}" /proc/$$/status' >"$work/over.txt" 2>"$work/over.err" || fail "oversubscribed run"
[ "$(sort -u "$work/over.txt")" = "$mine" ] || fail "more ranks than CPUs: bound anyway: $(cat "$work/over.txt")"
grep -q "not binding" "$work/over.err" || fail "more ranks than CPUs: no notice: $(cat "$work/over.err")"
bounded "$strata" launch -n 2 --bind socket -- true 2>"$work/bindbad.err"
[ $? -eq 2 ] || fail "--bind socket: want exit 2"
grep -q "core or none" "$work/bindbad.err" || fail "--bind socket: message: $(cat "$work/bindbad.err")"

# --- 2. --order and --tag ---
bounded "$strata" launch -n 3 --order 2,0,1 --tag -- sh -c 'echo "hi from $STRATA_RANK"; echo "err $STRATA_RANK" >&2; printf "no newline"' >"$work/tag.out" 2>"$work/tag.err"
[ $? -eq 0 ] || fail "tag run failed"
for r in 0 1 2; do
  grep -qx "\[$r\] hi from $r" "$work/tag.out" || fail "tag line of rank $r: $(cat "$work/tag.out")"
  grep -qx "\[$r\] no newline" "$work/tag.out" || fail "unterminated tail of rank $r"
  grep -qx "\[$r\] err $r" "$work/tag.err" || fail "tagged stderr of rank $r"
done
# untagged output passes through unchanged
out=$(bounded "$strata" launch -n 1 -- printf 'a\nb')
[ "$out" = "$(printf 'a\nb')" ] || fail "output changed: '$out'"
# stdin reaches rank 0 only
out=$(echo piped | bounded "$strata" launch -n 2 -- sh -c 'read -r x; echo "$STRATA_RANK:$x"' | sort | tr '\n' ' ')
[ "$out" = "0:piped 1: " ] || fail "stdin: '$out'"

# --- 3. a failing rank: its status, the others stopped quickly, nothing left behind ---
rm -f "$work/pids"
t0=$(now_ms)
bounded "$strata" launch -n 3 -- sh -c 'echo $$ >>'"$work/pids"'; if [ $STRATA_RANK = 1 ]; then sleep 0.3; exit 7; fi; exec sleep 60' 2>"$work/fail.err"
rc=$?
dt=$(($(now_ms) - t0))
[ $rc -eq 7 ] || fail "failing rank: exit $rc, expected 7"
[ $dt -lt 4000 ] || fail "others not stopped quickly (${dt} ms)"
grep -q "rank 1 .*exited with status 7" "$work/fail.err" || fail "no message: $(cat "$work/fail.err")"
for p in $(cat "$work/pids"); do alive "$p" && fail "rank pid $p survived"; done
# death by signal gives 128+signal
bounded "$strata" launch -n 2 -- sh -c 'if [ $STRATA_RANK = 0 ]; then kill -9 $$; fi; exec sleep 60' 2>/dev/null
rc=$?
[ $rc -eq 137 ] || fail "rank killed by SIGKILL: exit $rc, expected 137"
# a rank that ignores SIGTERM gets SIGKILL after the grace period
t0=$(now_ms)
bounded "$strata" launch -n 2 --grace 1 -- sh -c 'if [ $STRATA_RANK = 0 ]; then sleep 0.5; exit 3; fi; trap "" TERM; sleep 60' 2>/dev/null
rc=$?
dt=$(($(now_ms) - t0))
[ $rc -eq 3 ] || fail "grace run: exit $rc, expected 3"
[ $dt -ge 1400 ] && [ $dt -lt 5000 ] || fail "SIGKILL after grace took ${dt} ms (expected 0.5 s + 1 s grace)"
# grandchildren die with their rank (process groups)
rm -f "$work/gpids"
bounded "$strata" launch -n 2 -- sh -c 'sleep 60 & echo $! >>'"$work/gpids"'; if [ $STRATA_RANK = 1 ]; then sleep 0.3; exit 1; fi; wait' 2>/dev/null
sleep 0.2
for p in $(cat "$work/gpids"); do alive "$p" && fail "grandchild $p survived"; done
# a command that does not exist
bounded "$strata" launch -n 2 -- /nonexistent/cmd 2>"$work/enoent.err"
rc=$?
[ $rc -eq 127 ] || fail "missing command: exit $rc, expected 127"
grep -q "cannot run '/nonexistent/cmd'" "$work/enoent.err" || fail "missing command message"
bounded "$strata" launch -n 3 -- true || fail "all ranks succeeding: exit $?"
out=$(bounded "$strata" launch -np 2 sh -c 'echo $STRATA_WORLD_SIZE' | sort -u)
[ "$out" = 2 ] || fail "-np 2 without --: '$out'"

# --- 4. signals sent to the launcher are forwarded ---
rm -f "$work/ready" "$work/got"
"$strata" launch -n 3 -- sh -c 'trap "echo \$STRATA_RANK >>'"$work/got"'; exit 0" TERM; echo x >>'"$work/ready"'; while :; do sleep 0.05; done' &
launcher=$!
wait_for_lines "$work/ready" 3 || fail "ranks did not start"
kill -TERM $launcher
t0=$(now_ms)
wait $launcher
rc=$?
[ $rc -eq 0 ] || fail "after forwarded SIGTERM: exit $rc, expected 0"
[ "$(sort "$work/got" | tr '\n' ' ')" = "0 1 2 " ] || fail "SIGTERM not forwarded to every rank: $(cat "$work/got" 2>/dev/null)"
rm -f "$work/ready" "$work/pids"
"$strata" launch -n 2 -- sh -c 'echo $$ >>'"$work/pids"'; exec sleep 60' &
launcher=$!
wait_for_lines "$work/pids" 2 || fail "ranks did not start"
kill -HUP $launcher
wait $launcher
rc=$?
[ $rc -eq 129 ] || fail "after forwarded SIGHUP: exit $rc, expected 129"
for p in $(cat "$work/pids"); do alive "$p" && fail "rank $p survived SIGHUP"; done

# --- 5. no orphans even when the launcher is SIGKILLed ---
rm -f "$work/pids"
"$strata" launch -n 2 -- sh -c 'echo $$ >>'"$work/pids"'; exec sleep 60' &
launcher=$!
wait_for_lines "$work/pids" 2 || fail "ranks did not start"
kill -KILL $launcher
wait $launcher 2>/dev/null
sleep 0.3
for p in $(cat "$work/pids"); do alive "$p" && fail "rank $p outlived a SIGKILLed launcher"; done

# --- 6. usage errors exit 2 with a message ---
expect_usage() {
  "$strata" launch "$@" >/dev/null 2>"$work/usage.err"
  rc=$?
  [ $rc -eq 2 ] || fail "launch $*: exit $rc, expected 2"
  [ -s "$work/usage.err" ] || fail "launch $*: no message"
}
expect_usage -- true
expect_usage -n 0 -- true
expect_usage -n x -- true
expect_usage -n 2
expect_usage -n 2 --bogus -- true
expect_usage -n 3 --order 0,1 -- true
expect_usage -n 3 --order 0,1,1 -- true
expect_usage -n 3 --order 0,1,3 -- true
expect_usage -n 2 --addr nohost -- true
"$strata" launch --help | grep -q "usage: strata launch" || fail "launch --help"

# --- 7. strata store: serves, answers, stops on SIGINT/SIGTERM ---
"$strata" store --help | grep -q "usage: strata store" || fail "store --help"
"$strata" store --addr nonsense >/dev/null 2>&1
[ $? -eq 2 ] || fail "store with a bad address should exit 2"
for sig in INT TERM; do
  "$strata" store --addr 127.0.0.1:0 >"$work/store.out" 2>&1 &
  store=$!
  wait_for_lines "$work/store.out" 1 || fail "store printed nothing"
  grep -Eq '^strata store listening on 127\.0\.0\.1:[0-9]+$' "$work/store.out" || fail "store banner: $(cat "$work/store.out")"
  port=$(sed -n 's/.*:\([0-9]*\)$/\1/p' "$work/store.out")
  bash -c "exec 3<>/dev/tcp/127.0.0.1/$port" || fail "store does not accept connections"
  kill -$sig $store
  for _ in $(seq 50); do alive $store || break; sleep 0.1; done
  if alive $store; then fail "store ignored SIG$sig"; kill -9 $store; fi
  wait $store
  rc=$?
  [ $rc -eq 0 ] || fail "store after SIG$sig: exit $rc, expected 0"
done
# two launches can share a standalone store address? no: a busy --addr is a clear error
"$strata" store --addr 127.0.0.1:0 >"$work/store.out" 2>&1 &
store=$!
port=""
for _ in $(seq 100); do # the store's "listening on ADDR:PORT" line, up to 10 s
  port=$(sed -n 's/.*listening on [0-9.]*:\([0-9][0-9]*\).*/\1/p' "$work/store.out" | head -1)
  [ -n "$port" ] && break
  sleep 0.1
done
[ -n "$port" ] || fail "the store printed no port: $(cat "$work/store.out")"
"$strata" launch -n 1 --addr 127.0.0.1:$port -- true 2>"$work/busy.err"
rc=$?
[ $rc -eq 1 ] || fail "launch on a busy port: exit $rc, expected 1"
grep -q "cannot serve the store" "$work/busy.err" || fail "busy port message: $(cat "$work/busy.err")"
kill -TERM $store
wait $store

if [ $failures -ne 0 ]; then
  echo "test_launch: $failures failure(s)"
  exit 1
fi
echo "test_launch: ok"
