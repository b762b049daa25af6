#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/diloco/plan_vs_demo.py DIR LINKS STRATA SHAPES RANK_CORES — `strata plan` against what the
sharded demonstration measured (bench/diloco/run_sharded.sh writes DIR and calls this).

For each DiLoCo run of DIR without fragments or delay (the whole outer exchange inside the outer
step): `strata plan --links LINKS --workload diloco --param-shapes SHAPES --sync-every H
--wire-bits B --rank-cores RANK_CORES --json`, beside
  - the WAN bytes of each outer step, each site's ranks together (train_sharded.py's
    wan_bytes_per_step at the outer steps every site took part in), which must equal the plan's;
  - the outer exchange's time (report.py's outer_exchange_s: the later site's slowest rank), whose
    median is compared with the plan's exchange time.
Prints a markdown table; exits 1 when a byte count differs from the plan's.
"""
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from report import outer_exchange_s  # noqa: E402

BITS = {"none": 32, "default": 32, "bf16": 16, "int8": 8, "int4": 4}


def main():
    d, links, strata, shapes, rank_cores = sys.argv[1:6]
    rows, bad = [], 0
    for name in sorted({f.split(".")[0] for f in os.listdir(d) if f.endswith(".0.json")}):
        sites = []
        for s in (0, 1):
            path = os.path.join(d, f"{name}.{s}.json")
            if os.path.exists(path):
                sites.append(json.load(open(path)))
        if len(sites) != 2 or name.endswith("-kill"):
            continue
        c = sites[0]["config"]
        times = outer_exchange_s(sites)
        if not times or "wan_bytes_per_step" not in sites[0]:
            continue
        H, bits = c["sync_every"], BITS[c["compress"]]
        plan = json.loads(subprocess.run(
            [strata, "plan", "--links", links, "--workload", "diloco", "--param-shapes", shapes,
             "--sync-every", str(H), "--wire-bits", str(bits), "--rank-cores", rank_cores,
             "--json"], check=True, capture_output=True, text=True).stdout)["diloco"]["sharded"]
        per_outer = set()
        for r in sites:
            first = r["first_step"]
            for i, b in enumerate(r["wan_bytes_per_step"]):
                if (first + i) % H == 0 and b >= 0:
                    per_outer.add(b)
        planned_b = plan["wan_bytes_per_outer_step"]
        exact = per_outer == {planned_b}
        bad += not exact
        med = statistics.median(times) * 1000
        ms = plan["exchange_ms_per_outer_step"]
        rows.append(f"| {name} | {'f32' if bits == 32 else c['compress']} | {planned_b:,.0f} | "
                    f"{', '.join(f'{b:,}' for b in sorted(per_outer))} | {ms:.1f} ms "
                    f"(codec {plan['codec_ms_per_outer_step']:.1f}) | {med:.1f} ms "
                    f"({med / ms - 1:+.0%}; {len(times)} outer steps, "
                    f"{min(times) * 1000:.0f}-{max(times) * 1000:.0f}) |")
    if not rows:
        print("plan_vs_demo: no DiLoCo run without fragments or delay in", d, file=sys.stderr)
        return 1
    print(f"\nThe planner against the demonstration (--rank-cores {rank_cores}):\n")
    print("| run | wire | WAN bytes per outer step, a site: planned | measured | "
          "outer exchange: planned | measured, median |")
    print("|---|---|---|---|---|---|")
    print("\n".join(rows))
    print("bytes: exact" if not bad else f"bytes: {bad} runs differ from the plan")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
