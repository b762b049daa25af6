#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/diloco/plan_check.sh [--quick] — does `strata plan` predict DiLoCo over FSDP2 shards?
# Root: 2 emulated sites x 2 ranks over `strata netem` (1 Gbit/s, 25 ms each way, the sharded
# demonstration's link), the demonstration's model (train.py's ByteLM, 1.9M parameters, its
# shapes from plan_check.py --shapes). For each wire (f32, int8): `strata plan --workload diloco
# --param-shapes ... --json` over a link matrix of that link gives each rank's shard values, WAN
# bytes per outer step and the outer exchange's time; then every rank runs strata.DiLoCo over
# that many values against the same shard index of the other site (bench/diloco/plan_check.py),
# the four at once, and times its outer exchanges. Prints prediction against measurement: the
# bytes must be equal (exit 1 otherwise); the time is the median exchange of the site (its
# slowest rank), the first one (connections warming up) left out.
# Raw results: bench/results/diloco-plan/. Environment: BUILD, STRATA_PYTHON (torch for the
# shapes), PLAN_EXCHANGES (8; --quick 4), PLAN_WIRES (encoding:bits pairs; "none:32 int8:8").
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_init diloco-plan "$@"
exchanges=${PLAN_EXCHANGES:-8}
[ $quick -eq 1 ] && exchanges=4
out=$root/bench/results/diloco-plan
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log

shapes=$(PYTHONPATH=$build/python "$py" "$here/plan_check.py" --shapes)

netem_up dlpc 1800 --sites 2 --ranks-per-site 2 \
  --link '*:rate=1gbit,delay=25ms'

# the 4 ranks share this host's cores: each progress thread's share, for the codec's cost
rank_cores=$(awk -v n="$(nproc)" 'BEGIN { s = n / 4; print (s < 1 ? s : 1) }')
fails=0
wires=${PLAN_WIRES:-none:32 int8:8}
for wire in $wires; do
  compress=${wire%%:*} bits=${wire##*:}
  "$strata" plan --links "$here/links-2x2-1gbit-25ms.json" --workload diloco --param-shapes "$shapes" \
    --sync-every 50 --wire-bits "$bits" --rank-cores "$rank_cores" --json >"$out/plan-$compress.json"
  port=$((20000 + RANDOM % 20000))
  timeout -k 5 "${PLAN_TIMEOUT:-600}" "$strata" netem exec --name "$name" 0 -- env PYTHONPATH="$build/python" \
    "$py" "$here/plan_check.py" --serve-store "10.77.0.1:$port" >"$out/$compress.store.log" 2>&1 &
  store=$!
  pids+=("$store")
  sleep 2
  children=()
  for s in 0 1; do
    for l in 0 1; do
      values=$("$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))["diloco"]["sharded"]
print([g["values"] for g in d["ranks"] if g["first"] <= int(sys.argv[2]) <= g["last"]][0])' \
        "$out/plan-$compress.json" "$l")
      timeout -k 5 "${PLAN_TIMEOUT:-600}" "$strata" netem exec --name "$name" "$s" -- env PYTHONPATH="$build/python" \
        STRATA_SITE="site$s" STRATA_LOG="${STRATA_LOG:-warn}" OMP_NUM_THREADS=1 "$py" "$here/plan_check.py" \
        --store "10.77.0.1:$port" --job "$name" --site "$s" --local "$l" --values "${values%.*}" \
        --compress "$compress" --exchanges "$exchanges" --out "$out/$compress.$s$l.json" \
        >"$out/$compress.$s$l.log" 2>&1 &
      children+=($!)
      pids+=($!)
    done
  done
  rc=0
  for pid in "${children[@]}"; do wait "$pid" || rc=1; done
  kill "$store" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "diloco-plan: the $compress run failed; its logs:" >&2
    tail -n 5 "$out/$compress".*.log >&2 || true
    fails=$((fails + 1))
  fi
done

"$py" - "$out" $wires <<'PY' || fails=$((fails + 1))
import json, statistics, sys
out = sys.argv[1]
bad = 0
print(f"{'wire':5} {'':6} {'values':>8} {'WAN B/outer planned':>20} {'measured':>10} "
      f"{'exchange ms planned':>20} {'measured':>9}")
for compress in [w.split(":")[0] for w in sys.argv[2:]]:
    plan = json.load(open(f"{out}/plan-{compress}.json"))["diloco"]["sharded"]
    ranks = {(s, l): json.load(open(f"{out}/{compress}.{s}{l}.json")) for s in (0, 1) for l in (0, 1)}
    for s in (0, 1):
        site_bytes = 0
        for l in (0, 1):
            r = ranks[(s, l)]
            g = [g for g in plan["ranks"] if g["first"] <= l <= g["last"]][0]
            per_outer = r["wan_bytes"] / r["exchanges"]
            site_bytes += per_outer
            if per_outer != g["wan_bytes_per_outer_step"]:
                bad += 1
            print(f"{compress:5} {s}.{l:<4} {r['values']:8} {g['wan_bytes_per_outer_step']:20.0f} "
                  f"{per_outer:10.0f}")
        # the site's exchange k ends when its slowest rank's does
        times = [max(ranks[(s, l)]["times_s"][k] for l in (0, 1))
                 for k in range(1, len(ranks[(s, 0)]["times_s"]))]
        median = statistics.median(times) * 1000
        planned = plan["exchange_ms_per_outer_step"]
        print(f"{compress:5} site {s} {'':8} {plan['wan_bytes_per_outer_step']:20.0f} "
              f"{site_bytes:10.0f} {planned:20.1f} {median:9.1f}  "
              f"({median / planned - 1:+.0%}; first {max(ranks[(s, l)]['times_s'][0] for l in (0, 1)) * 1000:.0f} ms)")
        if site_bytes != plan["wan_bytes_per_outer_step"]:
            bad += 1
print("bytes: exact" if not bad else f"bytes: {bad} figures differ")
sys.exit(1 if bad else 0)
PY
exit $((fails > 0))
