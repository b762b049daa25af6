#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/hier.sh BUILD_DIR [BYTES] [ITERS] — hierarchical vs flat ring allreduce on 2 emulated sites
# of 2 ranks each (`strata netem`, docs/netem.md): one WAN link of RATE (default 1gbit) and DELAY
# one way (default 10ms) between the sites, loopback inside a site. Ranks 0,1 run in site 0 and
# 2,3 in site 1 with STRATA_SITE set, so AUTO picks the hierarchical allreduce (src/coll/hier.c);
# STRATA_ALGO=ring forces the flat ring. Prints both measured times (mean out-of-place time of
# `strata bench`), the measured ratio and the α-β model's ratio, then one line
# "hier_ratio measured=X predicted=Y" for scripts.
#
# The model (the textbook α-β costs of Thakur, Rabenseifner & Gropp, IJHPCA 2005, as in
# src/model/cost.c), n = BYTES, B = WAN rate, α = one-way delay, intra-site links taken as free:
#   flat ring, p = 4, ring 0→1→2→3→0: two hops cross the WAN, one per direction; every rank sends
#     2(p-1)/p·n = 1.5n over its outgoing link, so T_flat = 1.5n/B + 2(p-1)α;
#   hier: reduce-scatter inside sites, then ranks (0,2) and (1,3) allreduce n/2 each across the
#     WAN (each sends n/2, two flows share a direction: n per direction), then allgather inside:
#     T_hier = n/B + 2(S-1)α with S = 2.
# Needs root, /dev/net/tun and `ip netns`; only the emulation it creates is touched.
set -u
build=${1:?usage: bench/hier.sh BUILD_DIR [BYTES] [ITERS]}
bytes=${2:-64M}
iters=${3:-3}
rate=${RATE:-1gbit}
delay=${DELAY:-10ms}
strata=$build/strata
# Tell strata the WAN rate (auto TCP buffers are sized from RTT x this hint, docs/config.md);
# the 10 Gb/s default hint over-buffers a slower emulated link and parallel flows then collide.
link_gbps=${STRATA_TCP_LINK_GBPS:-$(echo "$rate" | awk '/gbit$/ { print $0 + 0 } /mbit$/ { print ($0 + 0) / 1000 }')}
[ -x "$strata" ] || { echo "hier.sh: $strata is missing" >&2; exit 1; }
py=${STRATA_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=python3
name=hier$$
work=$(mktemp -d)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  "$strata" netem down --name "$name" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT
bounded() { timeout -k 2 120 "$@"; }

bounded "$strata" netem up --name "$name" --sites 2 --lifetime 300 \
  --link "0-1:rate=$rate,delay=$delay" >/dev/null || { echo "hier.sh: netem up failed" >&2; exit 1; }

# run ALGO_ENV: 4 ranks, rank r in site r / 2; prints the mean out-of-place time in us.
run() {
  local port=$((20000 + RANDOM % 20000)) children=() rc=0
  bounded "$strata" netem exec --name "$name" 0 -- "$strata" store --addr "10.77.0.1:$port" \
    >/dev/null 2>&1 &
  local store=$!
  pids+=($store)
  sleep 0.3
  rm -f "$work/b.json"
  for r in 0 1 2 3; do
    local json=()
    [ $r -eq 0 ] && json=(-J "$work/b.json")
    bounded "$strata" netem exec --name "$name" $((r / 2)) -- env "$@" \
      STRATA_ADDR="10.77.0.1:$port" STRATA_STORE_EXTERNAL=1 STRATA_RANK=$r STRATA_WORLD_SIZE=4 \
      STRATA_JOB_ID="$name-$port" STRATA_SITE="site$((r / 2))" STRATA_TIMEOUT=100 \
      STRATA_TCP_LINK_GBPS="$link_gbps" \
      "$strata" bench allreduce -b "$bytes" -e "$bytes" -n "$iters" -w 1 -c 1 "${json[@]}" \
      >"$work/out.$r" 2>&1 &
    children+=($!)
  done
  for pid in "${children[@]}"; do wait "$pid" || rc=1; done
  kill "$store" 2>/dev/null
  [ $rc -eq 0 ] || { echo "hier.sh: bench failed: $(tail -3 "$work/out.0")" >&2; echo 0; return; }
  "$py" -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]["out_of_place"]
assert r["nwrong"] == 0, "wrong results"
print(r["time"])' "$work/b.json" || echo 0
}

flat_us=$(run STRATA_ALGO=ring)
hier_us=$(run STRATA_ALGO=auto)
"$py" - "$bytes" "$rate" "$delay" "$flat_us" "$hier_us" <<'PY'
import re, sys
def size(s):
    m = re.fullmatch(r"(\d+)([KMG]?)", s)
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]
def rate_Bps(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmg]?)bit", s)
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8
def delay_s(s):
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|us|s)", s)
    return float(m.group(1)) * {"ms": 1e-3, "us": 1e-6, "s": 1}[m.group(2)]
n, B, a = size(sys.argv[1]), rate_Bps(sys.argv[2]), delay_s(sys.argv[3])
flat_us, hier_us = float(sys.argv[4]), float(sys.argv[5])
p, S = 4, 2
t_flat = 2 * (p - 1) / p * n / B + 2 * (p - 1) * a
t_hier = n / B + 2 * (S - 1) * a
print("allreduce %s B, 2 sites x 2 ranks, WAN %s %s one way" % (sys.argv[1], sys.argv[2], sys.argv[3]))
print("flat ring   : measured %10.0f us   model %10.0f us" % (flat_us, t_flat * 1e6))
print("hierarchical: measured %10.0f us   model %10.0f us" % (hier_us, t_hier * 1e6))
ratio = flat_us / hier_us if hier_us > 0 else 0
print("hier_ratio measured=%.3f predicted=%.3f" % (ratio, t_flat / t_hier))
sys.exit(0 if flat_us > 0 and hier_us > 0 else 1)
PY
