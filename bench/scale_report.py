# SPDX-License-Identifier: Apache-2.0
"""bench/scale_report.py RESULTS_DIR — the figures of bench/scale.sh: scale.csv, scale.json and
scale.svg in RESULTS_DIR, and a Markdown table on stdout.

RESULTS_DIR/runs.tsv has one line per run (system, ranks, status, wall_s, launch_epoch_s, note);
RESULTS_DIR/raw/<system>-<ranks>/<rank>.txt holds what each rank wrote (bench/scale_rank.c's
line format). Per run: wall (launch to the launcher's exit), ready (launch to the moment the last
rank's init returned), init (the slowest rank's init call, and rank 0's), the first allreduce
(slowest rank), descriptors, RSS and PSS per rank (rank 0, median, max), the store requests and
bytes per rank where counted. Plain SVG written by hand: no plotting library needed.
"""
import csv
import json
import math
import os
import re
import statistics
import sys

SYSTEMS = [("strata", "#1f77b4"), ("openmpi", "#d62728"), ("gloo", "#2ca02c"),
           ("strata-counted", "#9467bd"), ("strata-1stream", "#8c564b")]
BASE_FDS = 6  # a strata rank's descriptors before any peer (src/model/startup.c: base_fds)
FIELDS = ["system", "ranks", "status", "note", "wall_s", "ready_s", "init_max_s", "init_rank0_s",
          "allreduce_max_s", "fds_rank0", "fds_median", "fds_max", "rss_mb_rank0",
          "rss_mb_median", "rss_mb_max", "pss_mb_median", "store_requests_rank0",
          "store_requests_median", "store_requests_max", "store_bytes_total", "time_wait_after", "launcher_rss_mb", "launcher_hwm_mb", "import_median_s",
          "ranks_reported"]


def read_ranks(path):
    rows = []
    if not os.path.isdir(path):
        return rows
    for name in os.listdir(path):
        if not name.endswith(".txt"):
            continue
        with open(os.path.join(path, name)) as f:
            parts = f.read().split()
        if len(parts) < 12:
            continue
        rows.append({"rank": int(parts[0]), "nranks": int(parts[1]),
                     "start": float(parts[2]), "init_end": float(parts[3]),
                     "init_s": float(parts[4]), "allreduce_s": float(parts[5]),
                     "fds": int(parts[6]), "rss_kb": int(parts[7]), "hwm_kb": int(parts[8]),
                     "pss_kb": int(parts[9]), "requests": int(parts[10]),
                     "bytes": int(parts[11]),
                     "import_s": float(parts[12]) if len(parts) > 12 else None,
                     "parent_rss_kb": int(parts[13]) if len(parts) > 13 else -1,
                     "parent_hwm_kb": int(parts[14]) if len(parts) > 14 else -1})
    return sorted(rows, key=lambda r: r["rank"])


def summarize(run, rows):
    out = {k: None for k in FIELDS}
    note, time_wait = run["note"], None
    m = re.search(r"(?:; )?(\d+) in TIME_WAIT after$", note)
    if m:
        note, time_wait = note[:m.start()], int(m.group(1))
    out.update({"system": run["system"], "ranks": run["ranks"], "status": run["status"],
                "note": note, "wall_s": run["wall_s"], "ranks_reported": len(rows),
                "time_wait_after": time_wait})
    if not rows:
        return out
    r0 = rows[0] if rows[0]["rank"] == 0 else None
    med = statistics.median
    out["ready_s"] = round(max(r["init_end"] for r in rows) - run["launch_epoch_s"], 4)
    out["init_max_s"] = round(max(r["init_s"] for r in rows), 4)
    out["allreduce_max_s"] = round(max(r["allreduce_s"] for r in rows), 6)
    out["fds_median"] = med(r["fds"] for r in rows)
    out["fds_max"] = max(r["fds"] for r in rows)
    out["rss_mb_median"] = round(med(r["rss_kb"] for r in rows) / 1024, 2)
    out["rss_mb_max"] = round(max(r["rss_kb"] for r in rows) / 1024, 2)
    out["pss_mb_median"] = round(med(r["pss_kb"] for r in rows) / 1024, 2)
    if r0:
        out["init_rank0_s"] = round(r0["init_s"], 4)
        out["fds_rank0"] = r0["fds"]
        out["rss_mb_rank0"] = round(r0["rss_kb"] / 1024, 2)
        if r0["parent_rss_kb"] > 0:
            out["launcher_rss_mb"] = round(r0["parent_rss_kb"] / 1024, 2)
            out["launcher_hwm_mb"] = round(r0["parent_hwm_kb"] / 1024, 2)
    if all(r["requests"] >= 0 for r in rows):
        out["store_requests_median"] = med(r["requests"] for r in rows)
        out["store_requests_max"] = max(r["requests"] for r in rows)
        out["store_bytes_total"] = sum(r["bytes"] for r in rows)
        if r0:
            out["store_requests_rank0"] = r0["requests"]
    imports = [r["import_s"] for r in rows if r["import_s"] is not None]
    imports = [i for i in imports if i > 0]
    if imports:
        out["import_median_s"] = round(med(imports), 3)
    return out


def panel(x0, y0, w, h, title, ylabel, lines, xs):
    """Log-log chart of one metric against ranks, one polyline per system."""
    ys = [y for _, _, pts in lines for _, y in pts if y and y > 0]
    if not ys:
        return []
    ymin = 10 ** math.floor(math.log10(min(ys)))
    ymax = 10 ** math.ceil(math.log10(max(ys)))
    if ymax <= ymin:
        ymax = ymin * 10
    xmin, xmax = min(xs), max(xs)
    if xmax <= xmin:
        xmax = xmin * 2

    def xpos(x):
        return w * (math.log(x) - math.log(xmin)) / (math.log(xmax) - math.log(xmin))

    def ypos(y):
        return h - h * (math.log(y) - math.log(ymin)) / (math.log(ymax) - math.log(ymin))

    out = [f'<g transform="translate({x0},{y0})">',
           f'<rect width="{w}" height="{h}" fill="none" stroke="#444"/>',
           f'<text x="{w / 2}" y="-8" text-anchor="middle" font-size="13">{title}</text>',
           f'<text x="{w / 2}" y="{h + 30}" text-anchor="middle" font-size="11">ranks</text>',
           f'<text x="-46" y="{h / 2}" text-anchor="middle" font-size="11" '
           f'transform="rotate(-90 -46 {h / 2})">{ylabel}</text>']
    for x in xs:
        out.append(f'<text x="{xpos(x):.1f}" y="{h + 14}" text-anchor="middle" '
                   f'font-size="10">{x}</text>')
    decade = ymin
    while decade <= ymax * 1.0001:
        out.append(f'<line x1="0" x2="{w}" y1="{ypos(decade):.1f}" y2="{ypos(decade):.1f}" '
                   f'stroke="#ddd"/>')
        out.append(f'<text x="-4" y="{ypos(decade) + 3:.1f}" text-anchor="end" '
                   f'font-size="10">{decade:g}</text>')
        decade *= 10
    for label, color, pts in lines:
        pts = [(x, y) for x, y in pts if y and y > 0]
        if not pts:
            continue
        path = " ".join(f"{xpos(x):.1f},{ypos(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{xpos(x):.1f}" cy="{ypos(y):.1f}" r="3" fill="{color}"/>')
    out.append("</g>")
    return out


def draw(summary, path):
    metrics = [("init_max_s", "init (slowest rank)", "seconds"),
               ("ready_s", "launch to all ranks ready", "seconds"),
               ("allreduce_max_s", "first 4-byte allreduce", "seconds"),
               ("fds_rank0", "open descriptors, rank 0", "descriptors"),
               ("rss_mb_median", "RSS per rank (median)", "MiB"),
               ("wall_s", "whole run (launch to exit)", "seconds")]
    xs = sorted({s["ranks"] for s in summary})
    shown = [(name, color) for name, color in SYSTEMS if name in ("strata", "openmpi", "gloo")
             and any(s["system"] == name for s in summary)]
    width, height, cols = 1000, 640, 3
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           'font-family="sans-serif">', '<rect width="100%" height="100%" fill="white"/>']
    for i, (key, title, unit) in enumerate(metrics):
        lines = [(name, color, [(s["ranks"], s[key]) for s in summary
                                if s["system"] == name and s["status"] == "ok"])
                 for name, color in shown]
        svg += panel(70 + (i % cols) * 320, 40 + (i // cols) * 300, 250, 220, title, unit,
                     lines, xs)
    for i, (name, color) in enumerate(shown):
        svg.append(f'<text x="{70 + 120 * i}" y="{height - 12}" font-size="12" '
                   f'fill="{color}">&#9632; {name}</text>')
    svg.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")


def fmt(v, spec="{:.3g}"):
    return "-" if v is None else spec.format(v)


def main():
    if len(sys.argv) != 2:
        print("usage: scale_report.py RESULTS_DIR", file=sys.stderr)
        return 2
    top = sys.argv[1]
    runs = []
    with open(os.path.join(top, "runs.tsv")) as f:
        for line in f:
            p = line.rstrip("\n").split("\t")
            if len(p) < 5 or p[0] == "system":
                continue
            runs.append({"system": p[0], "ranks": int(p[1]), "status": p[2],
                         "wall_s": float(p[3]) if p[3] else None,
                         "launch_epoch_s": float(p[4]) if p[4] else 0.0,
                         "note": p[5] if len(p) > 5 else ""})
    summary = [summarize(run, read_ranks(os.path.join(top, "raw", f"{run['system']}-"
                                                                   f"{run['ranks']}")))
               for run in runs]
    with open(os.path.join(top, "scale.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(summary)
    with open(os.path.join(top, "scale.json"), "w") as f:
        json.dump(summary, f, indent=1)
    draw(summary, os.path.join(top, "scale.svg"))
    print("| system | ranks | status | init (slowest) s | ready s | 1st allreduce ms | "
          "fds rank 0 / median / max | RSS MiB rank 0 / median / max | launcher RSS MiB | "
          "store req/rank | whole run s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for s in summary:
        fds = f"{fmt(s['fds_rank0'], '{}')} / {fmt(s['fds_median'], '{:g}')} / {fmt(s['fds_max'], '{}')}"
        rss = (f"{fmt(s['rss_mb_rank0'], '{:.1f}')} / {fmt(s['rss_mb_median'], '{:.1f}')} / "
               f"{fmt(s['rss_mb_max'], '{:.1f}')}")
        ar = None if s["allreduce_max_s"] is None else s["allreduce_max_s"] * 1e3
        req = (f"{fmt(s['store_requests_median'], '{:g}')} (max {s['store_requests_max']})"
               if s["store_requests_median"] is not None else "-")
        status = s["status"] + (f" ({s['note']})" if s["note"] else "")
        print(f"| {s['system']} | {s['ranks']} | {status} | {fmt(s['init_max_s'])} | "
              f"{fmt(s['ready_s'])} | {fmt(ar)} | {fds} | {rss} | {fmt(s['launcher_rss_mb'], '{:.1f}')} | "
              f"{req} | {fmt(s['wall_s'])} |")
    model_path = os.path.join(top, "model.csv")
    if os.path.exists(model_path):
        compare(summary, model_path)
    calibrate(summary)
    return 0


def solve(a, b):
    """Least squares by the normal equations (3 unknowns), without numpy."""
    n = len(a[0])
    m = [[sum(r[i] * r[j] for r in a) for j in range(n)] + [sum(r[i] * y for r, y in zip(a, b))]
         for i in range(n)]
    for i in range(n):
        p = max(range(i, n), key=lambda k: abs(m[k][i]))
        m[i], m[p] = m[p], m[i]
        if abs(m[i][i]) < 1e-30:
            return None
        for k in range(n):
            if k != i:
                f = m[k][i] / m[i][i]
                m[k] = [x - f * y for x, y in zip(m[k], m[i])]
    return [m[i][n] / m[i][i] for i in range(n)]


def calibrate(summary):
    """The start-up model's costs from the strata runs: cores x init = N x process +
    requests x request + connections x connection, with the requests of the counted runs (the
    eager formula where none was counted) and the connections from the descriptors measured.
    Runs with one stream per pair (strata-1stream) separate connections from requests."""
    cores = os.cpu_count() or 1
    counted = {s["ranks"]: s["store_requests_median"] for s in summary
               if s["system"] == "strata-counted" and s["store_requests_median"] is not None}
    rows, ys, labels = [], [], []
    for s in summary:
        if s["system"] not in ("strata", "strata-1stream") or s["status"] != "ok":
            continue
        n = s["ranks"]
        req = counted.get(n, 2 * n + 5 + (n - 1) / 2) * n
        conns = n * (s["fds_median"] - BASE_FDS) / 2
        rows.append([n, req, conns])
        ys.append(s["init_max_s"] * cores)
        labels.append((s["system"], n, s["init_max_s"]))
    if len(rows) < 3:
        return
    x = solve(rows, ys)
    how = ""
    if not x or min(x) < 0:
        # the full mesh's requests and connections both grow as N^2: with one stream count
        # they cannot be told apart, and on a busy host the request's share is lost in the
        # noise; it then keeps the model's cost (server + client: a store round trip on
        # loopback, a few microseconds of CPU each side)
        request_s = 8e-6
        x = solve([[r[0], r[2]] for r in rows], [y - r[1] * request_s for r, y in zip(rows, ys)])
        if not x:
            return
        x = [x[0], request_s, x[1]]
        how = " (request cost fixed, not fitted)"
    print(f"\ncalibration ({len(rows)} strata runs, {cores} cores): process {x[0] * 1e6:.0f} us, "
          f"request {x[1] * 1e6:.1f} us, connection {x[2] * 1e6:.1f} us of CPU{how}")
    for (system, n, got), r in zip(labels, rows):
        fit = sum(a * b for a, b in zip(r, x)) / cores
        print(f"  {system} {n} ranks: init {got:.3g} s, fitted {fit:.3g} s "
              f"({got / fit if fit > 0 else float('nan'):.2f}x)")


def compare(summary, model_path):
    """The start-up model (strata-scale-model, this host's cores) beside the measured strata runs:
    the ratio measured/model says how well the model holds, scheme by scheme."""
    with open(model_path) as f:
        model = {(r["scheme"], int(r["ranks"])): r for r in csv.DictReader(f)}
    print("\nmodel (src/model/startup.c, this host's cores) against the measured strata runs\n")
    print("| ranks | init s measured | eager model | lazy model | fds rank 0 measured | eager | lazy "
          "| store req/rank measured (counted) | eager | lazy |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    by = {(s["system"], s["ranks"]): s for s in summary}
    for n in sorted({s["ranks"] for s in summary}):
        m, c = by.get(("strata", n)), by.get(("strata-counted", n))
        e, l = model.get(("eager", n)), model.get(("lazy", n))
        if not m or not e or not l or m["status"] != "ok":
            continue
        req = c["store_requests_median"] if c and c["status"] == "ok" else None
        print(f"| {n} | {fmt(m['init_max_s'])} | {float(e['init_s']):.3g} "
              f"({m['init_max_s'] / float(e['init_s']):.2f}x) | {float(l['init_s']):.3g} | "
              f"{fmt(m['fds_rank0'], '{}')} | {float(e['fds_per_rank']):g} | "
              f"{float(l['fds_per_rank']):g} | {fmt(req, '{:g}')} | "
              f"{float(e['requests_per_rank']):g} | {float(l['requests_per_rank']):g} |")


if __name__ == "__main__":
    sys.exit(main())
