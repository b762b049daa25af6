# SPDX-License-Identifier: Apache-2.0
"""bench/serve/plot.py LOAD_JSONL OUT_SVG — throughput and p99 latency vs offered rate.

One line per load run (python3 -m strata.serve load --json): runs with a replica killed are
drawn apart from those without. Plain SVG written by hand: no plotting library needed.
"""
import json
import math
import sys


def series(rows, killed):
    pts = sorted((r["rate"], r["throughput_rps"], r["p99_ms"] or 0, r["lost"])
                 for r in rows if bool(r.get("killed")) == killed)
    return pts


def panel(x0, y0, w, h, title, xlabel, ylabel, lines, xmax, ymax, ymin=None):
    """A line chart; with ymin the y axis is logarithmic from ymin to ymax."""
    def ypos(y):
        if ymin:
            y = max(y, ymin)
            return h - h * (math.log(y) - math.log(ymin)) / (math.log(ymax) - math.log(ymin))
        return h - h * min(y, ymax) / ymax

    out = [f'<g transform="translate({x0},{y0})">',
           f'<rect width="{w}" height="{h}" fill="none" stroke="#444"/>',
           f'<text x="{w / 2}" y="-8" text-anchor="middle" font-size="13">{title}</text>',
           f'<text x="{w / 2}" y="{h + 32}" text-anchor="middle" font-size="11">{xlabel}</text>',
           f'<text x="-40" y="{h / 2}" text-anchor="middle" font-size="11" '
           f'transform="rotate(-90 -40 {h / 2})">{ylabel}</text>']
    for i in range(5):
        xv = xmax * i / 4
        out.append(f'<text x="{w * i / 4}" y="{h + 14}" text-anchor="middle" font-size="10">'
                   f'{xv:.3g}</text>')
    ticks = ([t for t in (100, 200, 500, 1000, 2000, 5000, 10000, 20000) if ymin <= t <= ymax]
             if ymin else [ymax * i / 4 for i in range(5)])
    for yv in ticks:
        out.append(f'<text x="-4" y="{ypos(yv) + 3:.1f}" text-anchor="end" font-size="10">'
                   f'{yv:.3g}</text>')
    for label, color, pts in lines:
        if not pts:
            continue
        path = " ".join(f"{w * x / xmax:.1f},{ypos(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{color}" stroke-width="2"/>')
        for x, y in pts:
            out.append(f'<circle cx="{w * x / xmax:.1f}" cy="{ypos(y):.1f}" r="3" '
                       f'fill="{color}"/>')
    for i, (label, color, _) in enumerate(lines):
        out.append(f'<text x="8" y="{16 + 14 * i}" font-size="11" fill="{color}">{label}</text>')
    out.append("</g>")
    return out


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    base, kill = series(rows, False), series(rows, True)
    xmax = max(r["rate"] for r in rows) * 1.1
    tmax = max(max(p[1] for p in base + kill), xmax) * 1.1
    pmax = max(p[2] for p in base + kill) * 1.1 or 1
    svg = ['<svg xmlns="http://www.w3.org/2000/svg" width="820" height="330" '
           'font-family="sans-serif">']
    svg += panel(70, 30, 320, 250, "throughput", "offered requests/s", "completed requests/s",
                 [("3 replicas", "#1f77b4", [(p[0], p[1]) for p in base]),
                  ("s1 killed at 40%", "#d62728", [(p[0], p[1]) for p in kill]),
                  ("offered", "#999", [(0, 0), (xmax, xmax)])], xmax, tmax)
    svg += panel(480, 30, 320, 250, "p99 latency (log scale)", "offered requests/s",
                 "ms (from arrival)",
                 [("3 replicas", "#1f77b4", [(p[0], p[2]) for p in base]),
                  ("s1 killed at 40%", "#d62728", [(p[0], p[2]) for p in kill])], xmax, pmax,
                 ymin=100)
    svg.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(svg) + "\n")


if __name__ == "__main__":
    main()
