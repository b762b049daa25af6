#!/usr/bin/env bash
# test_plan_cli.sh BUILD_DIR — `strata plan` end to end: every preset in text, JSON and SVG, the
# workload flags, --links (a measured link matrix), and bad input (clear message, exit 2).
set -u
build=${1:?usage: test_plan_cli.sh BUILD_DIR}
strata="$build/strata"
src=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { # description, command...
  local what=$1; shift
  if ! "$@"; then echo "FAIL $what"; fail=1; fi
}
expect_exit() { # code description command...
  local want=$1 what=$2; shift 2
  "$@" >"$tmp/out" 2>"$tmp/err"
  local got=$?
  if [ "$got" -ne "$want" ]; then
    echo "FAIL $what: exit $got, want $want"; cat "$tmp/err"; fail=1; return 1
  fi
  return 0
}
py=/usr/bin/python3; [ -x "$py" ] || py=python3

expect_exit 0 "--help" "$strata" plan --help && check "help text" grep -q -- "--workload" "$tmp/out"
expect_exit 0 "--list-presets" "$strata" plan --list-presets
presets=$(awk '{print $1}' "$tmp/out")
check "ten presets listed" test "$(echo "$presets" | wc -w)" -ge 10

for p in $presets; do
  expect_exit 0 "preset $p text" "$strata" plan --preset "$p" &&
    check "$p: decision in text" grep -q "^decision: " "$tmp/out"
  expect_exit 0 "preset $p json" "$strata" plan --preset "$p" --json &&
    check "$p: JSON schema" "$py" - "$tmp/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "strata-plan/1"
for k in ("topology", "workload", "layers", "predictions", "decision", "findings", "summary", "checks"):
    assert k in d, k
for p in d["predictions"]:
    for k in ("collective", "bytes", "algorithm", "time_us", "busbw_gbps", "scope", "chosen"):
        assert k in p, k
for f in d["findings"]:
    for k in ("id", "severity", "layer", "message", "fix", "where"):
        assert k in f, k
assert d["decision"]["choice"] and d["decision"]["reason"]
assert d["findings"] == [], d["findings"]   # presets are lint-clean
PY
  expect_exit 0 "preset $p svg" "$strata" plan --preset "$p" --svg "$tmp/$p.svg" &&
    check "$p: SVG parses" "$py" -c "import sys, xml.dom.minidom as m; m.parse(sys.argv[1])" "$tmp/$p.svg"
done

# point 8: the dgx-h100 plan predicts nccl-tests' published busbw (ring ~365-370, NVLS ~480 GB/s)
"$strata" plan --preset dgx-h100 --json >"$tmp/h100.json"
check "dgx-h100 busbw within 15%" "$py" - "$tmp/h100.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
node = {p["algorithm"]: p["busbw_gbps"] for p in d["predictions"] if p["scope"] == "node"}
assert abs(node["ring"] - 367.5) <= 0.15 * 367.5, node
assert abs(node["in-network"] - 480) <= 0.15 * 480, node
PY

# workloads from flags
expect_exit 0 "diloco flags" "$strata" plan --preset regions-2 --workload diloco --params 1e9 \
  --dtype f32 --step-ms 250 --inner-steps 100 --wire-bits 4 --fragments 4 --streams 32 --json &&
  check "diloco decision" "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['decision']['choice']=='overlay+diloco'; assert d['workload']['wire_bits']==4 and d['workload']['inner_steps']==100" "$tmp/out"
expect_exit 0 "rl flags" "$strata" plan --preset multicloud-wireguard --workload rl --update-fraction 0.1 --sync-every 8 --trainer-site gcp
check "rl names delta sync" grep -q "delta" "$tmp/out"
expect_exit 0 "inference flags" "$strata" plan --preset multicloud-wireguard --workload inference --cross-site-pipeline --replicas-per-site 0 --kv-mb 500 --token-ms 30
check "decode on overlay is flagged" grep -q "L3-OVERLAY-HOTPATH" "$tmp/out"
expect_exit 0 "bringup" "$strata" plan --preset roce-cluster --workload bringup
check "bringup checks" grep -q "all_reduce_perf" "$tmp/out"
expect_exit 0 "lint file" "$strata" plan "$src/tests/data/lint-l3-metrox-reach.yaml" --json
check "lint in JSON" grep -q '"id": "L3-METROX-REACH"' "$tmp/out"
expect_exit 0 "svg to stdout" "$strata" plan --preset dgx-h100 --svg -
check "svg on stdout" grep -q "^<svg" "$tmp/out"

# bad input: a clear message and exit 2
expect_exit 2 "no topology" "$strata" plan && check "says what to give" grep -q "preset" "$tmp/err"
expect_exit 2 "unknown preset" "$strata" plan --preset nope && check "names the preset" grep -q "nope" "$tmp/err"
expect_exit 2 "missing file" "$strata" plan "$tmp/absent.yaml"
printf 'sites:\n  - name: a\n    nodes: {count: 0, template: dgx-h100}\n' >"$tmp/bad.yaml"
expect_exit 2 "bad file" "$strata" plan "$tmp/bad.yaml" && check "file:line in error" grep -q "bad.yaml:3" "$tmp/err"
expect_exit 2 "unknown option" "$strata" plan --preset dgx-h100 --frobnicate
expect_exit 2 "bad number" "$strata" plan --preset dgx-h100 --params abc && check "names the flag" grep -q -- "--params" "$tmp/err"
expect_exit 2 "negative step" "$strata" plan --preset dgx-h100 --step-ms -5
expect_exit 2 "bad workload" "$strata" plan --preset dgx-h100 --workload fishing
expect_exit 2 "bad dtype" "$strata" plan --preset dgx-h100 --dtype f128
expect_exit 2 "both preset and file" "$strata" plan --preset dgx-h100 "$tmp/bad.yaml"
expect_exit 2 "unknown trainer site" "$strata" plan --preset regions-2 --workload rl --trainer-site mars
expect_exit 2 "missing value" "$strata" plan --preset dgx-h100 --params
expect_exit 2 "unwritable svg" "$strata" plan --preset dgx-h100 --svg "$tmp/no/such/dir/x.svg"

# --links: a measured link matrix (2 sites, RTT 30 ms, 1 Gbit/s) replaces the modeled metro link
links="$src/tests/data/links-metro-2-sites.json"
expect_exit 0 "--links text" "$strata" plan --preset metro-2-sites --links "$links" &&
  check "text names the measured link" grep -q "metro-fiber .*RTT 30 ms.*measured, median of 8 pairs" "$tmp/out" &&
  check "text: 3a RTT measured" grep -q "RTT 30 ms (measured)" "$tmp/out"
expect_exit 0 "--links json" "$strata" plan --preset metro-2-sites --links "$links" --params 1000 --json &&
  cp "$tmp/out" "$tmp/l30.json" &&
  check "--links JSON: measured link figures" "$py" - "$tmp/l30.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["schema"] == "strata-plan/1"
(l,) = d["links"]
assert l["source"] == "measured" and l["rtt_ms"] == 30 and l["latency_us"] == 15000, l
assert l["bandwidth_gbps"] == 0.125 and l["pairs"] == 8, l
m = d["link_matrix"]
assert m["mapping"] == "name" and m["grouping"] == "labels" and m["streams"] == 4, m
PY
"$py" - "$links" "$tmp/links60.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
d["latency_us"] = [[2 * v if v > 1000 else v for v in row] for row in d["latency_us"]]
json.dump(d, open(sys.argv[2], "w"))
PY
expect_exit 0 "--links doubled latency" "$strata" plan --preset metro-2-sites --links "$tmp/links60.json" --params 1000 --json &&
  check "doubling the latency slows the small allreduce" "$py" - "$tmp/l30.json" "$tmp/out" <<'PY'
import json, sys
def t(path):
    d = json.load(open(path))
    return [p["time_us"] for p in d["predictions"] if p["scope"] == "global" and p["chosen"]][0]
a, b = t(sys.argv[1]), t(sys.argv[2])
assert b >= a + 15000, (a, b)
PY
expect_exit 0 "modeled without --links" "$strata" plan --preset metro-2-sites --json &&
  check "no matrix: links modeled, link_matrix null" "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); assert d['link_matrix'] is None and d['links'][0]['source']=='modeled'" "$tmp/out"
expect_exit 0 "--links svg" "$strata" plan --preset metro-2-sites --links "$links" --svg "$tmp/m.svg" &&
  check "svg label says measured" grep -q "measured: 1 Gb/s - RTT 30 ms" "$tmp/m.svg"
expect_exit 0 "--links by order" "$strata" plan --preset regions-2 --links "$links" &&
  check "says mapped by order" grep -q "mapped by order, metro-a -> region-a" "$tmp/out"
expect_exit 0 "--links alone" "$strata" plan --links "$links" --json &&
  check "matrix-only topology" "$py" -c "import json,sys; d=json.load(open(sys.argv[1])); t=d['topology']; assert t['name']=='link-matrix' and t['sites']==2 and t['nodes']==4 and t['gpus']==0; assert d['link_matrix']['inside_sites']['applied']" "$tmp/out"
expect_exit 2 "--links name mismatch" "$strata" plan --preset metro-2-sites --links "$src/tests/data/links-name-mismatch.json" &&
  check "names the stranger" grep -q "tokyo" "$tmp/err"
expect_exit 2 "--links count mismatch" "$strata" plan --preset multicloud-wireguard --links "$links" &&
  check "says the counts" grep -q "matrix: 2 sites, topology: 3" "$tmp/err"
expect_exit 2 "--links malformed" "$strata" plan --preset metro-2-sites --links "$src/tests/data/links-malformed.json" &&
  check "file:line:col" grep -q "links-malformed.json:10:5" "$tmp/err"
expect_exit 2 "--links missing" "$strata" plan --preset metro-2-sites --links "$tmp/absent.json"
expect_exit 2 "--links missing value" "$strata" plan --preset metro-2-sites --links

[ $fail -eq 0 ] && echo "ok"
exit $fail
