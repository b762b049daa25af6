#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_doctor_json.sh BUILD_DIR — `strata doctor --json` on this very node: stdout is one JSON
# document (python3's json.load reads it), it holds every check of docs/doctor.md once, graded
# PASS/WARN/FAIL/INFO with a fix exactly for WARN and FAIL, and the exit status is the one the
# document states (1 when a check FAILs, else 0), whatever this node's grades are; and
# docs/doctor.md has a row for every check.
set -u
build=${1:?usage: test_doctor_json.sh BUILD_DIR}
strata="$build/strata"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
py=/usr/bin/python3; [ -x "$py" ] || py=python3
"$strata" doctor --json --link 10,20 >"$tmp/out" 2>"$tmp/err"
status=$?
if ! "$py" - "$tmp/out" "$status" <<'PY'; then
import json, sys
with open(sys.argv[1]) as f:
    d = json.load(f)
status = int(sys.argv[2])
ids = ["cores", "numa", "memory", "shm", "ptrace", "memlock", "nofile", "tcp_buffers",
       "congestion", "mtu", "clock", "gpus", "nvlink", "rdma"]
assert d["doctor_format"] == 1 and d["root"] == "/", d["root"]
assert len(d["nodes"]) == 1 and d["job"] is None
checks = d["nodes"][0]["checks"]
assert [c["id"] for c in checks] == ids, [c["id"] for c in checks]
counts = {"pass": 0, "warn": 0, "fail": 0, "info": 0}
for c in checks:
    assert c["status"] in ("PASS", "WARN", "FAIL", "INFO"), c
    assert isinstance(c["found"], str) and c["found"], c
    assert (c["fix"] is not None) == (c["status"] in ("WARN", "FAIL")), c
    counts[c["status"].lower()] += 1
assert d["counts"] == counts, (d["counts"], counts)
assert d["exit_status"] == (1 if counts["fail"] else 0) == status, (d["exit_status"], status)
assert d["verdict"] == ("fail" if counts["fail"] else "warn" if counts["warn"] else "pass")
print("test_doctor_json: %d PASS, %d WARN, %d FAIL, %d INFO on this node, exit %d" %
      (counts["pass"], counts["warn"], counts["fail"], counts["info"], status))
PY
  echo "FAIL strata doctor --json (exit $status)"; cat "$tmp/out" "$tmp/err"; exit 1
fi
# docs/doctor.md describes every check, node and job alike, in its tables
src=$(cd "$(dirname "$0")/.." && pwd)
for id in cores numa memory shm ptrace memlock nofile tcp_buffers congestion mtu clock gpus \
  nvlink rdma job_nodes job_clock job_sweep; do
  grep -q "^| \`$id\` |" "$src/docs/doctor.md" || { echo "FAIL docs/doctor.md: no row for $id"; exit 1; }
done
# the text report says the same
"$strata" doctor --link 10,20 >"$tmp/text" 2>&1
text_status=$?
if [ "$text_status" -ne "$status" ] || ! grep -q "^summary: .*; exit $status$" "$tmp/text"; then
  echo "FAIL text report: exit $text_status, want $status"; cat "$tmp/text"; exit 1
fi
echo "test_doctor_json: ok"
