#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_launch_elastic.sh BUILD_DIR — `strata launch --elastic`: a rank that fails does not stop
# the others and the launcher exits 0 when the survivors finish; --max-restarts starts a
# replacement that joins the running job (the chaos worker: a rank killed mid-training, the
# survivors shrink, the replacement joins at the next grow, no wrong sum); the exit status and
# the summary line say what happened; --max-restarts without --elastic is a usage error. And
# without --elastic, a rank's output written just before it ends is not lost when another rank
# fails first (the others get a moment to end on their own).
set -u
build=${1:?usage: test_launch_elastic.sh BUILD_DIR}
strata="$build/strata"
[ -x "$strata" ] || { echo "test_launch_elastic: $strata is missing: skipped"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
bounded() { timeout -k 5 60 "$@"; }
# Ranks that must end after rank 1 wait for its mark ($MARK) first (started at their own pace,
# any rank may come first).
after_rank1='while [ ! -e "$MARK" ]; do sleep 0.02; done; sleep 0.3'

# 1. --elastic: rank 1 fails, the others finish; exit 0 and a summary
MARK=$work/mark1 bounded "$strata" launch -n 3 --elastic -- sh -c \
  'if [ $STRATA_RANK = 1 ]; then touch "$MARK"; exit 5; fi; '"$after_rank1"'; echo "done $STRATA_RANK $STRATA_ELASTIC"' \
  >"$work/el.out" 2>"$work/el.err"
rc=$?
[ $rc -eq 0 ] || fail "--elastic with survivors: exit $rc, want 0 ($(cat "$work/el.err"))"
[ "$(sort "$work/el.out" | tr '\n' ' ')" = "done 0 1 done 2 1 " ] ||
  fail "--elastic: survivors' output: $(cat "$work/el.out")"
grep -q "rank 1 .*exited with status 5; the other ranks go on" "$work/el.err" ||
  fail "--elastic: failure line: $(cat "$work/el.err")"
grep -q -- "--elastic: 1 rank failure, 0 replacements started; the last rank to end exited with 0" \
  "$work/el.err" || fail "--elastic: summary: $(cat "$work/el.err")"

# 2. --elastic: the last rank to end failed: its job failed, with the first failure's status
MARK=$work/mark2 bounded "$strata" launch -n 2 --elastic -- sh -c \
  'if [ $STRATA_RANK = 1 ]; then touch "$MARK"; exit 4; fi; '"$after_rank1"'; exit 6' \
  >/dev/null 2>"$work/el2.err"
rc=$?
[ $rc -eq 4 ] || fail "--elastic, everyone failed: exit $rc, want 4 ($(cat "$work/el2.err"))"

# 3. usage
bounded "$strata" launch -n 2 --max-restarts 1 -- true 2>"$work/usage.err"
[ $? -eq 2 ] || fail "--max-restarts without --elastic: want exit 2"
grep -q "needs --elastic" "$work/usage.err" || fail "usage message: $(cat "$work/usage.err")"

# 4. without --elastic: rank 0's buffered report, written as it ends, survives rank 1's failure
py=/usr/bin/python3; [ -x "$py" ] || py=python3
MARK=$work/mark4 bounded "$strata" launch -n 2 -- "$py" -c '
import os, sys, time
if os.environ["STRATA_RANK"] == "1":
    open(os.environ["MARK"], "w").close()
    sys.exit(3)
while not os.path.exists(os.environ["MARK"]): time.sleep(0.02)
print("report of rank 0")  # block-buffered: written only when the process ends
time.sleep(0.3)' >"$work/report.out" 2>"$work/report.err"
rc=$?
[ $rc -eq 3 ] || fail "report run: exit $rc, want 3"
grep -qx "report of rank 0" "$work/report.out" || fail "rank 0's report was lost: $(cat "$work/report.out")"

# 5. --max-restarts: a training rank killed mid-run is replaced by one that joins
worker="$build/strata-chaos-worker"
if [ -x "$worker" ]; then
  start=$(date +%s.%N)
  STRATA_TIMEOUT=3 bounded "$strata" launch -n 3 --elastic --max-restarts 1 -- sh -c \
    'export CHAOS_ID=$((STRATA_RANK + ${STRATA_JOIN:-0} * 10)) CHAOS_MAX_S=5 CHAOS_GROW_EVERY=5 \
       CHAOS_STEP_PAUSE_S=0.01 CHAOS_LOG='"$work"'/chaos.$STRATA_RANK.${STRATA_JOIN:-0}; \
     if [ $STRATA_RANK = 2 ] && [ -z "${STRATA_JOIN:-}" ]; then \
       ( until grep -q "\"ev\":\"init\"" "$CHAOS_LOG" 2>/dev/null; do sleep 0.05; done; \
         sleep 0.5; kill -9 $$ ) & fi; \
     exec "'"$worker"'"' >"$work/restart.out" 2>"$work/restart.err"
  rc=$?
  took=$(echo "$(date +%s.%N) - $start" | bc)
  [ $rc -eq 0 ] || fail "--max-restarts: exit $rc, want 0 ($(tail -5 "$work/restart.err"))"
  grep -q "rank 2 .*killed by signal 9.*starting a replacement that joins at the next grow (restart 1 of 1)" \
    "$work/restart.err" || fail "--max-restarts: no replacement line: $(cat "$work/restart.err")"
  [ -s "$work/chaos.2.1" ] && grep -q '"ev":"joined"' "$work/chaos.2.1" ||
    fail "the replacement never joined: $(cat "$work/chaos.2.1" 2>/dev/null | head -5)"
  if grep -h '"ev":"wrong"' "$work"/chaos.* | grep -q .; then fail "a wrong sum"; fi
  grep -q '"ev":"shrink"' "$work/chaos.0.0" || fail "the survivors never shrank"
  echo "--max-restarts: a killed rank replaced and joined; the job took ${took} s"
else
  echo "test_launch_elastic: no strata-chaos-worker: the restart case was not run"
fi

[ $failures -eq 0 ] && echo "test_launch_elastic: ok"
exit $((failures != 0))
