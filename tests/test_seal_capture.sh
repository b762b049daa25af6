#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_seal_capture.sh BUILD_DIR — what a capture of the wire shows: two ranks on this host over
# TCP (STRATA_SHM=0) allreduce (max) 4 MiB that repeat a known ASCII pattern, while tcpdump
# records the loopback. With STRATA_ENCRYPT=off the pattern is in the capture (a control: the
# capture sees the data); with STRATA_ENCRYPT=on it is nowhere in it, though the result is right.
# Needs root and tcpdump (scripts/deps.sh test installs it), and the Python package.
set -u
build=${1:?usage: test_seal_capture.sh BUILD_DIR}
strata=$build/strata
py=${STRATA_PYTHON:-/usr/bin/python3}
[ -x "$strata" ] || { echo "test_seal_capture: $strata is missing"; exit 1; }
if [ "$(id -u)" -ne 0 ] || ! command -v tcpdump >/dev/null; then
  echo "SKIP test_seal_capture: needs root and tcpdump"; exit 77
fi
[ -d "$build/python/strata" ] || { echo "SKIP test_seal_capture: no Python package in $build"; exit 77; }
work=$(mktemp -d)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
dump_pid=
cleanup() {
  [ -n "$dump_pid" ] && kill "$dump_pid" 2>/dev/null && wait "$dump_pid" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cat >"$work/job.py" <<'PY'
import sys
import numpy as np, strata
pattern = np.frombuffer(b"STRATA-PLAINTEXT-PATTERN-0123456", dtype=np.int32)  # 32 bytes
data = np.tile(pattern, (4 << 20) // 32)
with strata.Comm() as comm:
    out = data.copy()
    comm.allreduce(out, op="max")
    assert np.array_equal(out, data), "wrong result"
    # one write per line: the ranks share the log, and print() writes its pieces one by one
    sys.stdout.write(f"rank {comm.rank} ok\n")
    sys.stdout.flush()
PY

# capture MODE: the pattern's occurrences in a capture of one run with STRATA_ENCRYPT=MODE
capture() {
  local pcap=$work/$1.pcap
  tcpdump -i lo -U -n -s 0 -w "$pcap" tcp 2>"$work/$1.tcpdump" &
  dump_pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$work/$1.tcpdump" && break; sleep 0.05; done
  STRATA_SHM=0 STRATA_ENCRYPT=$1 STRATA_SECRET=capture-test STRATA_TIMEOUT=20 \
    PYTHONPATH=$build/python timeout -k 2 60 "$strata" launch -n 2 -- "$py" "$work/job.py" \
    >"$work/$1.log" 2>&1
  local rc=$?
  sleep 0.3 # let tcpdump write the last packets
  kill "$dump_pid"; wait "$dump_pid" 2>/dev/null; dump_pid=
  if [ $rc -ne 0 ] || [ "$(grep -o "rank [01] ok" "$work/$1.log" | sort -u | wc -l)" != 2 ]; then
    echo "the STRATA_ENCRYPT=$1 run failed:" >&2; cat "$work/$1.log" >&2
    echo failed; return
  fi
  "$py" -c 'import sys; print(open(sys.argv[1], "rb").read().count(b"PLAINTEXT-PATTERN"))' "$pcap"
}
n_off=$(capture off)
n_on=$(capture on)
echo "pattern occurrences in the capture: STRATA_ENCRYPT=off $n_off, STRATA_ENCRYPT=on $n_on"
case "$n_off$n_on" in *failed*|"") fail "a run failed" ;; esac
[ "$n_off" -gt 1000 ] 2>/dev/null || fail "the unencrypted capture does not show the data ($n_off)"
[ "$n_on" = 0 ] || fail "the encrypted capture shows the plaintext ($n_on)"
[ "$failures" -eq 0 ] && echo "test_seal_capture: ok" || echo "test_seal_capture: $failures failure(s)"
[ "$failures" -eq 0 ]
