#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
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
# an option an error rules out is shown as not possible, with the finding's id, and not chosen
check "ruled out in JSON" "$py" - "$tmp/out" <<'PY'
import json, sys
plan = json.load(open(sys.argv[1]))
ext = [o for o in plan["decision"]["options"] if o["name"] == "fabric-extension"][0]
assert not ext["available"] and ext["ruled_out_by"] == "L3-METROX-REACH", ext
assert "L3-METROX-REACH" in ext["note"], ext
assert plan["decision"]["choice"] != "fabric-extension", plan["decision"]["choice"]
assert any(f["id"] == "L3-METROX-REACH" and f["severity"] == "error" for f in plan["findings"])
assert plan["links"][0]["extension_ruled_out"] == "L3-METROX-REACH", plan["links"][0]
PY
# what the RL framework ships: full weights where a delta is smaller is flagged, and not otherwise
expect_exit 0 "rl-sync full" "$strata" plan "$src/tests/data/lint-l4-rl-full-sync.yaml" --workload rl --rl-sync full
check "full sync flagged" grep -q "L4-RL-FULL-SYNC" "$tmp/out"
expect_exit 0 "rl-sync full, weights smaller" "$strata" plan "$src/tests/data/lint-l4-rl-full-sync.yaml" --workload rl --rl-sync full --update-fraction 1
check "full sync of the smaller not flagged" sh -c "! grep -q L4-RL-FULL-SYNC '$tmp/out'"
expect_exit 2 "rl-sync bad" "$strata" plan --preset dgx-h100 --workload rl --rl-sync sometimes && check "names the flag" grep -q -- "--rl-sync" "$tmp/err"
# zero figures are refused where they are
printf 'sites:\n  - {name: a}\n  - {name: b}\nlinks:\n  - between: [a, b]\n    physical: {kind: dark_fiber, km: 10, capacity_gbps: 0}\n' >"$tmp/zero.yaml"
expect_exit 2 "zero capacity" "$strata" plan "$tmp/zero.yaml" && check "zero capacity at file:line:col" grep -q "zero.yaml:6:57: expected a number above 0" "$tmp/err"
expect_exit 0 "svg to stdout" "$strata" plan --preset dgx-h100 --svg -
check "svg on stdout" grep -q "^<svg" "$tmp/out"

# bad input: a clear message and exit 2
expect_exit 2 "no topology" "$strata" plan && check "says what to give" grep -q "preset" "$tmp/err"
# the sharded DiLoCo layout: shapes set the parameters; bad shapes, --params beside them and more
# fragments than parameters are refused by name
links="$src/tests/data/links-metro-2-sites.json"
expect_exit 0 "param-shapes" "$strata" plan --links "$links" --workload diloco --param-shapes 10x3,7,4 --sync-every 4 --json &&
  check "sharded layout in JSON" "$py" - "$tmp/out" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["diloco"]["sharded"]
assert d["workload"]["params"] == 41 and s["values"] == 41 and s["from_shapes"], s
assert s["ranks_per_site"] == 2 and s["uneven_parameters"] == 1, s  # 7 rows: 4 and 3
assert [(g["first"], g["last"], g["values"]) for g in s["ranks"]] == [(0, 0, 21), (1, 1, 20)], s
assert s["wan_bytes_per_outer_step"] == 2 * 41, s  # bf16, the model once
PY
expect_exit 2 "param-shapes bad" "$strata" plan --links "$links" --workload diloco --param-shapes 10x && check "names the flag" grep -q -- "--param-shapes" "$tmp/err"
expect_exit 2 "param-shapes with params" "$strata" plan --links "$links" --workload diloco --param-shapes 10 --params 10 && check "names both" grep -q -- "--params" "$tmp/err"
expect_exit 2 "fragments over shapes" "$strata" plan --links "$links" --workload diloco --param-shapes 10,4 --fragments 3 --sync-every 6 && check "says fragments" grep -q -- "--fragments 3" "$tmp/err"
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

# DiLoCo's outer sync in bytes: 2 sites of 2 CPU ranks (the link matrix alone: 1 Gbit/s, RTT 30
# ms), every wire encoding, 1 and 4 fragments, against the formula written out here: a site
# sends 2(S-1)/S x the encoded fragment per exchange (S = 2: the fragment once), every fragment
# once per outer step; encoded f32 values: none 4n, bf16 2n, int8 n + 8 per 256-value block,
# int4 ceil(n/2) + 8 per block
for bits in 32 16 8 4; do
  for frags in 1 4; do
    expect_exit 0 "diloco bytes $bits-bit $frags fragments" "$strata" plan --links "$links" \
      --workload diloco --params 1000003 --sync-every 100 --fragments $frags --delay 2 \
      --wire-bits $bits --step-ms 250 --json &&
      check "diloco bytes $bits-bit $frags fragments match the formula" "$py" - "$tmp/out" $bits $frags <<'PY'
import json, math, sys
d = json.load(open(sys.argv[1])); bits, P = int(sys.argv[2]), int(sys.argv[3])
n, H, S, ranks, gbps, rtt_ms, step_ms, tau = 1000003, 100, 2, 2, 0.125, 30.0, 250.0, 2
def wire(v):
    blocks = math.ceil(v / 256)
    return {32: 4 * v, 16: 2 * v, 8: v + 8 * blocks, 4: math.ceil(v / 2) + 8 * blocks}[bits]
lo, rem = n // P, n % P
outer = 2 * (S - 1) / S * (rem * wire(lo + 1) + (P - rem) * wire(lo))
g = d["diloco"]
assert g["encoding"] == {32: "none", 16: "bf16", 8: "int8", 4: "int4"}[bits], g
assert g["sites"] == S and g["ranks_per_site"] == ranks, g
close = lambda a, b: abs(a - b) <= 1e-5 * abs(b)   # JSON reals carry 6 digits
assert close(g["wan_bytes_per_outer_step"], outer), (g, outer)
assert close(g["wan_bytes_per_fragment"], outer / P), (g, outer / P)
assert close(g["wan_bytes_per_outer_step_per_rank"], outer / ranks), g
assert close(g["wan_bytes_per_inner_step"], outer / H), g
sync = 2 * (S - 1) / S * 4 * n
assert close(g["sync_wan_bytes_per_step"], sync) and close(g["sync_ratio"], sync * H / outer), g
lat = 2 * (S - 1) * rtt_ms / 2   # measured link: one-way = RTT/2, no modeled stack time
ex = lat + outer / P / (gbps * 1e6)
assert close(g["exchange_latency_ms"], lat) and close(g["exchange_ms"], ex), (g, ex)
assert close(g["overlap_ms"], tau * step_ms) and g["hidden"] == (ex <= tau * step_ms), g
assert close(g["exposed_ms_per_outer_step"], P * max(0, ex - tau * step_ms)), g
assert close(g["hide_gbps"], outer / P / ((tau * step_ms - lat) * 1e6)), g
assert d["workload"]["delay"] == tau and d["workload"]["inner_steps"] == H, d["workload"]
PY
  done
done
expect_exit 0 "diloco text" "$strata" plan --links "$links" --workload diloco --params 1e6 \
  --sync-every 100 --wire-bits 8 &&  # 1e6 + 8 x ceil(1e6 / 256)
  check "text: bytes per outer step" grep -q "per outer step (1 fragment, H=100): 1031256 per site" "$tmp/out"
expect_exit 0 "train-sync json" "$strata" plan --preset dgx-h100 --json &&
  check "one site: diloco null" "$py" -c "import json,sys; assert json.load(open(sys.argv[1]))['diloco'] is None" "$tmp/out"
expect_exit 0 "--delay H/P - 1" "$strata" plan --links "$links" --workload diloco --sync-every 100 \
  --fragments 4 --delay 24
expect_exit 2 "--delay H/P" "$strata" plan --links "$links" --workload diloco --sync-every 100 \
  --fragments 4 --delay 25 && check "names delay and H/P" grep -q "delay (25) < H / fragments (25" "$tmp/err"
expect_exit 2 "--delay beyond H/P" "$strata" plan --links "$links" --workload diloco --sync-every 10 \
  --delay 10 && check "names delay" grep -q "delay (10)" "$tmp/err"
expect_exit 2 "--wire-bits 3" "$strata" plan --links "$links" --workload diloco --wire-bits 3 &&
  check "names the encodings" grep -q -- "--wire-bits expects 32 (none), 16 (bf16), 8 (int8) or 4 (int4), got '3'" "$tmp/err"
expect_exit 2 "--fragments 0" "$strata" plan --links "$links" --workload diloco --fragments 0 &&
  check "names --fragments" grep -q -- "--fragments expects" "$tmp/err"
expect_exit 2 "--fragments > H" "$strata" plan --links "$links" --workload diloco --sync-every 4 \
  --fragments 5 && check "names fragments and H" grep -q "fragments (5) <= H (4)" "$tmp/err"
expect_exit 2 "--sync-every 0" "$strata" plan --links "$links" --workload diloco --sync-every 0 &&
  check "names --sync-every" grep -q -- "--sync-every expects" "$tmp/err"
expect_exit 2 "--delay -1" "$strata" plan --links "$links" --workload diloco --delay -1 &&
  check "names --delay" grep -q -- "--delay expects" "$tmp/err"
expect_exit 2 "--sync-every vs --inner-steps" "$strata" plan --links "$links" --workload diloco \
  --sync-every 10 --inner-steps 20 && check "names both" grep -q "give one" "$tmp/err"

[ $fail -eq 0 ] && echo "ok"
exit $fail
