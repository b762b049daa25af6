#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/weights/report.py DIR — the weight-sync benchmark's table and targets from the per-rank
JSON files bench.py wrote (DIR/patch.RANK.json, DIR/full.RANK.json). Writes DIR/summary.json.

Per version: the bytes the publisher sent (one copy per site with subscribers), the bytes that
crossed between the sites (every rank's wan_bytes_sent, summed: one copy per remote site) and the
time from the round's start until the last subscriber's buffers held the version ("reached") and
until the last subscriber's call returned (after the round's verdict), as patches and as full
copies.
Targets (issue 30): patch bytes <= 1/10 of a full copy; a full copy reaches the last subscriber
within 1.3 x bytes / 1 Gbit/s + one RTT (50 ms); a patch version at least 4x sooner than a full
copy; every subscriber's weights identical to the publisher's at every version.
"""
import json
import os
import sys

LINK_BPS = 1e9
RTT_S = 0.050


def load(d, mode):
    ranks = {}
    for r in range(4):
        path = os.path.join(d, f"{mode}.{r}.json")
        if os.path.exists(path):
            ranks[r] = json.load(open(path))["rows"]
    return ranks


def prepared(d, mode):
    """What prepare() cost before the first version: seconds (the slowest rank) and bytes sent
    across sites (every rank's, summed), or None when the run skipped it."""
    preps = []
    for r in range(4):
        path = os.path.join(d, f"{mode}.{r}.json")
        if os.path.exists(path):
            preps.append(json.load(open(path)).get("prepare"))
    if not preps or any(p is None for p in preps):
        return None
    return {"seconds": max(p["seconds"] for p in preps),
            "wan_bytes": sum(p["wan_bytes_sent"] for p in preps),
            "warm_bytes": sum(p["warm_bytes_sent"] for p in preps)}


def per_version(ranks):
    out = {}
    if 0 not in ranks:
        return out
    for i, row in enumerate(ranks[0]):
        subs = [ranks[r][i] for r in ranks if r != 0 and i < len(ranks[r])]
        out[row["version"]] = {
            "seconds": max(s["end"] for s in subs) - row["start"] if subs else float("nan"),
            "reached": max(s.get("reached", s["end"]) for s in subs) - row["start"]
            if subs else float("nan"),
            "wan_bytes": sum(ranks[r][i]["wan_bytes_sent"] for r in ranks if i < len(ranks[r])),
            "stream_bytes": row["stream_bytes"], "full_bytes": row["full_bytes"],
            "publisher_bytes": row["bytes_sent"],
            "cpu_s": sum(ranks[r][i].get("cpu_s", 0.0) for r in ranks if i < len(ranks[r])),
            "ends": {r: ranks[r][i]["end"] - row["start"] for r in ranks
                     if r != 0 and i < len(ranks[r])},
            "patch_bytes": row["patch_bytes"], "changed": row["changed"],
            "elements": row["elements"], "encode_s": row["encode_s"], "hash_s": row["hash_s"],
            "identical": len(subs) == 3 and all(s["crc32"] == row["crc32"] for s in subs)}
    return out


def main():
    d = sys.argv[1]
    patch, full = per_version(load(d, "patch")), per_version(load(d, "full"))
    if not patch or not full:
        sys.exit("report: missing results (patch.*.json, full.*.json)")
    print(f"{'v':>3} {'changed':>9} {'patch B':>12} {'full B':>12} {'pub B full':>12} "
          f"{'WAN B patch':>12} {'WAN B full':>12} {'reached p':>9} {'reached f':>9} "
          f"{'s patch':>8} {'s full':>8} {'speedup':>8} {'identical':>9}")
    rows, ok = [], True
    for v in sorted(patch):
        p, f = patch[v], full.get(v)
        if not f:
            continue
        speedup = f["reached"] / p["reached"] if p["reached"] > 0 else float("inf")
        same = p["identical"] and f["identical"]
        print(f"{v:3d} {100 * p['changed'] / p['elements']:8.3f}% {p['patch_bytes']:12,} "
              f"{p['full_bytes']:12,} {f['publisher_bytes']:12,} {p['wan_bytes']:12,} "
              f"{f['wan_bytes']:12,} {p['reached']:9.3f} {f['reached']:9.3f} "
              f"{p['seconds']:8.3f} {f['seconds']:8.3f} {speedup:7.1f}x {str(same):>9}")
        rows.append({"version": v, "patch": p, "full": f, "speedup": speedup})
    for mode, table in (("patch", patch), ("full", full)):
        path = os.path.join(d, f"{mode}.forwarder.json")
        fwd = json.load(open(path)) if os.path.exists(path) else {}
        cpu = [table[v]["cpu_s"] for v in sorted(table)]
        print(f"{mode}: the 4 ranks used {min(cpu):.2f}-{max(cpu):.2f} CPU s per round; the "
              f"emulator's forwarder {fwd.get('forwarder_cpu_s', float('nan')):.2f} CPU s over "
              f"the {len(cpu)} rounds and their publishing ({fwd.get('wall_s', float('nan')):.1f} s)")
    preps = {mode: prepared(d, mode) for mode in ("patch", "full")}
    for mode, prep in preps.items():
        print(f"{mode}: " + ("no prepare() before version 1" if prep is None else
                             f"prepare() before version 1: {prep['seconds']:.3f} s, "
                             f"{prep['wan_bytes']:,} B across sites (of which warm-up "
                             f"{prep['warm_bytes']:,})"))
    later = [r for r in rows if r["version"] > 1]
    checks = []
    if later:
        worst = max(r["patch"]["patch_bytes"] / r["patch"]["full_bytes"] for r in later)
        checks.append((f"patch bytes <= 1/10 of full (worst {worst:.4f})", worst <= 0.1))
        # the bound of a round: what it streamed (a full copy; in the patch mode an anchor and
        # the patches it came with)
        bound = lambda r, m: 1.3 * r[m]["stream_bytes"] * 8 / LINK_BPS + RTT_S  # noqa: E731
        # every full copy: the full mode's, and the patch mode's rounds that carried an anchor
        # (version 1 at least)
        copies = [r["full"]["reached"] / bound(r, "full") for r in rows] + \
            [r["patch"]["reached"] / bound(r, "patch") for r in rows
             if r["patch"]["stream_bytes"] >= r["patch"]["full_bytes"]]
        slow = max(copies)
        checks.append((f"every full copy ({len(copies)}) reaches the last subscriber within "
                       f"1.3 x bytes/link + RTT (worst {slow:.2f} of the bound)", slow <= 1.0))
        slow_call = max(r["full"]["seconds"] / bound(r, "full") for r in rows)
        print(f"     (the calls, verdict included, returned within {slow_call:.2f} of that bound)")
        least = min(r["speedup"] for r in later)
        checks.append((f"patch reaches the last subscriber >= 4x sooner than full (least "
                       f"{least:.1f}x)", least >= 4))
    same = all(r["patch"]["identical"] and r["full"]["identical"] for r in rows)
    checks.append(("every subscriber identical to the publisher at every version", same))
    for what, good in checks:
        print(f"{'ok  ' if good else 'MISS'} {what}")
        ok = ok and good
    with open(os.path.join(d, "summary.json"), "w") as fh:
        json.dump({"rows": rows, "prepare": preps,
                   "checks": [{"what": w, "ok": g} for w, g in checks]}, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
