#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# test_doctor_tree.sh BUILD_DIR — `strata doctor` on made-up nodes: the trees under tests/doctor
# stand for /proc and /sys (--root, STRATA_DOCTOR_ROOT), so each check's grade is asserted: a
# healthy node passes (exit 0), a broken one FAILs the checks it must (exit 1) with the fix, the
# links of --link and --topo are judged against the TCP buffers, and bad input exits 2.
set -u
build=${1:?usage: test_doctor_tree.sh BUILD_DIR}
strata="$build/strata"
src=$(cd "$(dirname "$0")/.." && pwd)
trees="$src/tests/doctor"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
py=/usr/bin/python3; [ -x "$py" ] || py=python3
expect_exit() { # code description command...
  local want=$1 what=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $what: exit $got, want $want"; cat "$tmp/out" "$tmp/err"; fail=1; return 1
  fi
  return 0
}
# grades FILE ID=STATUS... : the JSON report in FILE has each check ID graded STATUS, and a fix
# exactly when the grade is WARN or FAIL
grades() {
  "$py" - "$@" <<'PY' || { echo "FAIL grades: $*"; fail=1; }
import json, sys
doc = json.load(open(sys.argv[1]))
checks = {c["id"]: c for c in doc["nodes"][0]["checks"]}
ok = True
for want in sys.argv[2:]:
    cid, status = want.split("=")
    got = checks.get(cid, {}).get("status")
    if got != status:
        print(f"  {cid}: {got}, want {status}: {checks.get(cid, {}).get('found')}")
        ok = False
for c in checks.values():
    if (c["fix"] is not None) != (c["status"] in ("WARN", "FAIL")):
        print(f"  {c['id']}: {c['status']} with fix {c['fix']!r}")
        ok = False
sys.exit(0 if ok else 1)
PY
}

# A healthy node: 8 CPUs on 2 NUMA nodes, big TCP buffers, bbr, jumbo frames, an active HCA.
expect_exit 0 "healthy tree" "$strata" doctor --json --root "$trees/pass" --link 100,40 &&
  cp "$tmp/out" "$tmp/pass.json" &&
  grades "$tmp/pass.json" cores=PASS numa=PASS memory=PASS ptrace=PASS memlock=PASS \
    nofile=PASS tcp_buffers=PASS congestion=PASS mtu=PASS clock=INFO gpus=PASS nvlink=INFO \
    rdma=PASS
"$py" - "$tmp/pass.json" <<'PY' || { echo "FAIL healthy tree: document"; fail=1; }
import json, sys
d = json.load(open(sys.argv[1]))
assert d["doctor_format"] == 1 and d["verdict"] in ("pass", "warn") and d["exit_status"] == 0, d
assert d["job"] is None and d["nodes"][0]["host"] == "node-pass", d["nodes"][0]["host"]
assert d["links"] == [{"name": "", "gbit_per_s": 100, "rtt_ms": 40}], d["links"]
assert d["counts"]["fail"] == 0
PY

# The same through STRATA_DOCTOR_ROOT, in text.
expect_exit 0 "STRATA_DOCTOR_ROOT" env STRATA_DOCTOR_ROOT="$trees/pass" "$strata" doctor &&
  { grep -q "^node node-pass" "$tmp/out" && grep -q "^summary: .* 0 FAIL" "$tmp/out"; } ||
  { echo "FAIL STRATA_DOCTOR_ROOT text"; cat "$tmp/out"; fail=1; }

# A broken node: 64 KiB of locked memory beside an HCA, 256 open files for 64 ranks, 6 MiB TCP
# buffers for 100 Gb/s x 40 ms, no bbr, Yama 2, NUMA balancing on, no /dev/shm, a small MTU, a
# port down.
expect_exit 1 "broken tree" "$strata" doctor --json --root "$trees/fail" --link 100,40 --ranks 64 &&
  grades "$tmp/out" cores=PASS numa=WARN memory=PASS shm=WARN ptrace=WARN memlock=FAIL \
    nofile=FAIL tcp_buffers=FAIL congestion=WARN mtu=WARN rdma=WARN
expect_exit 1 "broken tree, text" "$strata" doctor --root "$trees/fail" --link 100,40 --ranks 64
for line in "FAIL  memlock" "FAIL  nofile" "FAIL  tcp_buffers" "fix: ulimit -l unlimited" \
  "fix: ulimit -n 442" "net.core.rmem_max=250609664" "summary: 3 PASS, 6 WARN, 3 FAIL"; do
  grep -q -- "$line" "$tmp/out" || { echo "FAIL broken tree text: no '$line'"; fail=1; }
done
# 8 ranks (the default: one per CPU) need fewer descriptors than 256 allow
expect_exit 1 "broken tree, 8 ranks" "$strata" doctor --json --root "$trees/fail" &&
  grades "$tmp/out" nofile=PASS tcp_buffers=PASS congestion=PASS
# STRATA_TCP_CC naming what the kernel lacks fails every communicator
expect_exit 1 "STRATA_TCP_CC=bbr without bbr" env STRATA_TCP_CC=bbr "$strata" doctor --json \
  --root "$trees/fail" && grades "$tmp/out" congestion=FAIL

# Autotuning short of the link but rmem_max/wmem_max enough: strata fills it, others do not.
cp -r "$trees/pass" "$tmp/tuned"
printf '4096\t131072\t6291456\n' >"$tmp/tuned/proc/sys/net/ipv4/tcp_rmem"
expect_exit 0 "autotuning short" "$strata" doctor --json --root "$tmp/tuned" --link 10,50 &&
  grades "$tmp/out" tcp_buffers=WARN congestion=PASS
# more streams per pair need less each (STRATA_TCP_STREAMS)
expect_exit 0 "32 streams" env STRATA_TCP_STREAMS=32 "$strata" doctor --json --root "$tmp/tuned" \
  --link 10,50 && grades "$tmp/out" tcp_buffers=PASS
# alone, the job's ranks beyond this node's CPUs are taken to run elsewhere (a node with more
# ranks than CPUs is the job check's, test_doctor_launch.sh)
expect_exit 0 "64 ranks" "$strata" doctor --json --root "$trees/pass" --ranks 64 &&
  grades "$tmp/out" cores=PASS nofile=PASS

# Links from a link matrix (strata probe) and from a topology (the planner's model).
expect_exit 0 "--topo link matrix" "$strata" doctor --json --root "$trees/pass" \
  --topo "$src/tests/data/links-metro-2-sites.json" &&
  "$py" -c 'import json,sys; d=json.load(open(sys.argv[1])); assert d["links"] and all(l["rtt_ms"] > 0 for l in d["links"]), d["links"]' "$tmp/out" ||
  { echo "FAIL --topo link matrix: links"; fail=1; }
expect_exit 1 "--topo topology" "$strata" doctor --json --root "$trees/fail" \
  --topo "$src/examples/topologies/cloud-interconnect-global-reach.yaml" &&
  grades "$tmp/out" tcp_buffers=FAIL congestion=WARN

# Bad input: a clear message and exit 2.
expect_exit 2 "--link without RTT" "$strata" doctor --link 100
expect_exit 2 "--link zero" "$strata" doctor --link 0,10
expect_exit 2 "--link negative RTT" "$strata" doctor --link 10,-1
expect_exit 2 "--ranks 0" "$strata" doctor --ranks 0
expect_exit 2 "--root missing" "$strata" doctor --root "$tmp/nowhere" &&
  { grep -q "not a directory" "$tmp/err" || { echo "FAIL --root message"; fail=1; }; }
expect_exit 2 "STRATA_DOCTOR_ROOT missing" env STRATA_DOCTOR_ROOT="$tmp/nowhere" "$strata" doctor
expect_exit 2 "--topo missing" "$strata" doctor --topo "$tmp/nowhere.yaml"
expect_exit 2 "--topo malformed" "$strata" doctor --topo "$src/tests/data/links-malformed.json" &&
  { grep -q "links-malformed.json:[0-9]*:[0-9]*:" "$tmp/err" || { echo "FAIL --topo message"; fail=1; }; }
expect_exit 2 "unknown option" "$strata" doctor --frobnicate
expect_exit 2 "stray argument" "$strata" doctor extra
expect_exit 2 "bad STRATA_TCP_STREAMS" env STRATA_TCP_STREAMS=0 "$strata" doctor
expect_exit 0 "--help" "$strata" doctor --help &&
  { grep -q -- "--link GBPS,RTT_MS" "$tmp/out" || { echo "FAIL --help text"; fail=1; }; }

[ "$fail" -eq 0 ] && echo "test_doctor_tree: ok"
exit "$fail"
