#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_doctor_launch.sh BUILD_DIR — `strata doctor` as a job: `strata launch -n 2 -- strata
# doctor` over loopback runs the node checks on each rank, the job checks on rank 0 and the
# allreduce sweep with the model's prediction and a verdict per size; then, on made-up trees
# (STRATA_DOCTOR_ROOT), two "nodes" that differ, a node with more ranks than CPUs, and a job
# whose node FAILs: every rank exits 1, so the launcher does.
set -u
build=${1:?usage: test_doctor_launch.sh BUILD_DIR}
strata="$build/strata"
src=$(cd "$(dirname "$0")/.." && pwd)
trees="$src/tests/doctor"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
py=/usr/bin/python3; [ -x "$py" ] || py=python3

# 1. The real node, 2 ranks, with the sweep.
"$strata" launch -n 2 -- "$strata" doctor --json >"$tmp/job.json" 2>"$tmp/job.err"
status=$?
"$py" - "$tmp/job.json" "$status" <<'PY' || { echo "FAIL 2-rank doctor with sweep (exit $status)"; cat "$tmp/job.json" "$tmp/job.err"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
status = int(sys.argv[2])
job = d["job"]
assert job["ranks"] == 2 and job["nodes"] == 1, job
assert len(d["nodes"]) == 1 and d["nodes"][0]["ranks"] == [0, 1], d["nodes"]
assert [c["id"] for c in job["checks"]] == ["job_nodes", "job_clock", "job_sweep"], job["checks"]
sweep = job["sweep"]
assert sweep["ran"] and sweep["band"] == [0.75, 1.25], sweep
assert [r["bytes"] for r in sweep["rows"]] == [65536, 262144, 1048576, 4194304, 16777216], sweep
for r in sweep["rows"]:
    assert r["busbw_gbps"] > 0 and r["time_us"] > 0, r
    assert r["predicted_busbw_gbps"] is not None and r["predicted_busbw_gbps"] > 0, r
    ratio = r["predicted_busbw_gbps"] / r["busbw_gbps"]
    assert abs(r["ratio"] - ratio) <= 1e-4 * ratio, r
    assert r["verdict"] == ("within" if 0.75 <= r["ratio"] <= 1.25 else "outside"), r
sweep_check = job["checks"][2]
assert sweep_check["status"] in ("PASS", "WARN"), sweep_check  # results correct; speed is the host's
assert "results correct" in sweep_check["found"], sweep_check
assert d["exit_status"] == status == (1 if d["counts"]["fail"] else 0), (d["exit_status"], status)
print("test_doctor_launch: sweep %s, %s" % (sweep_check["status"],
      ", ".join("%d B %s" % (r["bytes"], r["verdict"]) for r in sweep["rows"])))
PY
# the bench's own table went to stderr, not into the JSON
grep -q "Collective test concluded: all_reduce_perf" "$tmp/job.err" ||
  { echo "FAIL the sweep's nccl-tests table is not on stderr"; fail=1; }

# 2. Two made-up nodes that differ (rank 0 on the healthy tree, rank 1 on the broken one): the
# job check names the checks graded differently, the clocks are compared across them, and the
# broken node's FAILs fail the job on every rank.
cat >"$tmp/per_rank.sh" <<'SH'
#!/bin/sh
if [ "$STRATA_RANK" = 0 ]; then tree=pass; else tree=fail; fi
STRATA_DOCTOR_ROOT="$TREES/$tree" exec "$STRATA" doctor --json --no-sweep --link 100,40
SH
TREES="$trees" STRATA="$strata" "$strata" launch -n 2 -- sh "$tmp/per_rank.sh" >"$tmp/two.json" 2>"$tmp/two.err"
status=$?
[ "$status" -eq 1 ] || { echo "FAIL two nodes: exit $status, want 1"; cat "$tmp/two.err"; fail=1; }
"$py" - "$tmp/two.json" <<'PY' || { echo "FAIL two nodes"; cat "$tmp/two.json"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert [n["host"] for n in d["nodes"]] == ["node-pass", "node-fail"], d["nodes"]
assert [n["ranks"] for n in d["nodes"]] == [[0], [1]]
checks = {c["id"]: c for c in d["job"]["checks"]}
nodes = checks["job_nodes"]
assert nodes["status"] == "WARN" and "nodes differ in: " in nodes["found"], nodes
for cid in ("memlock", "tcp_buffers", "rdma"):
    assert cid + " (node-pass PASS, node-fail " in nodes["found"], (cid, nodes["found"])
clock = checks["job_clock"]
assert clock["status"] == "PASS" and "node-fail" in clock["found"], clock  # one real clock
assert checks["job_sweep"]["status"] == "INFO", checks["job_sweep"]
assert d["exit_status"] == 1 and d["counts"]["fail"] >= 2, d["counts"]
PY

# 3. A node whose cpuset holds one CPU, 2 ranks on it.
cp -r "$trees/pass" "$tmp/onecpu"
mkdir -p "$tmp/onecpu/sys/fs/cgroup"
echo 0 >"$tmp/onecpu/sys/fs/cgroup/cpuset.cpus.effective"
STRATA_DOCTOR_ROOT="$tmp/onecpu" "$strata" launch -n 2 -- "$strata" doctor --no-sweep \
  >"$tmp/onecpu.txt" 2>&1
status=$?
{ [ "$status" -eq 0 ] && grep -q "WARN  cores .*2 ranks on this node share them" "$tmp/onecpu.txt" &&
  grep -q "WARN  job_nodes .*node-pass: 2 ranks on 1 CPU$" "$tmp/onecpu.txt"; } ||
  { echo "FAIL one CPU, 2 ranks (exit $status)"; cat "$tmp/onecpu.txt"; fail=1; }

[ "$fail" -eq 0 ] && echo "test_doctor_launch: ok"
exit "$fail"
