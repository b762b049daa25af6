#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/predict.sh — how well `strata bench --predict` agrees with the measurement on this host.
#
# For every collective x transport x rank count it runs
#   strata launch -n N -- strata bench COLL -a 3 -b 1M -e 256M -f 4 -n ITERS -w 2 --predict -J F
# (TCP: STRATA_SHM=0) RUNS times, interleaved (run 1 of every configuration, then run 2, ...),
# and prints predicted / measured out-of-place busbw per cell and run, then the count of cells
# whose every run lies inside [1-T, 1+T] (T = 0.25) and the count whose median does (in all and
# per rank count), and how many cells' own runs stay within the band around their median
# measurement (the measurement's reproducibility, which bounds any model's). Ranks run under
# `nice -n -20` when allowed (root), which takes the cores back from other work on a shared host
# but not the caches or the memory bus. A cell's own measurement can span more than 25% over
# three runs on a shared host, hence the median.
#
# `bench/predict.sh --rescore DIR` measures nothing: it re-scores the runs saved in DIR with the
# model of this build (BUILD/strata-repredict, bench/repredict.c), against the same measured rows,
# so a model change is judged on the rows the previous model was judged on.
# With several DIRs it scores each, then pools them: per cell, in how many sweeps its median lies
# outside the band, the count inside per sweep, and per rank count the cells whose median over every
# run of every sweep lies inside.
#
# ITERS is nccl-tests' own default, 20 timed calls per row: with fewer, a 1 MiB row is a window
# of a fraction of a millisecond that one preemption or one slow call decides.
#
# Environment: BUILD (default build), RUNS (default 3), ITERS (default 20), T (default 0.25),
# COLLS (default "allreduce reduce_scatter allgather broadcast"), RANKS (default "2 4"),
# TRANSPORTS (default "shm tcp"), MAXBYTES (default 256M). Output: a table on stdout, the raw
# JSON under bench/results/predict-<date>/.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case ${BUILD:=build} in /*) ;; *) BUILD=$root/$BUILD ;; esac # relative: to the project root
STRATA=$BUILD/strata
RUNS=${RUNS:-3}
ITERS=${ITERS:-20}
T=${T:-0.25}
COLLS=${COLLS:-allreduce reduce_scatter allgather broadcast}
RANKS=${RANKS:-2 4}
TRANSPORTS=${TRANSPORTS:-shm tcp}
MAXBYTES=${MAXBYTES:-256M}

[ -x "$STRATA" ] || { echo "bench/predict.sh: $STRATA not built (make build)" >&2; exit 1; }
rescore=""
if [ "${1:-}" = --rescore ] && [ $# -gt 2 ]; then
  # Several sweeps: each scored alone, then per cell in how many of them its median lies outside
  # the band (a cell outside in one sweep of several is as likely the host as the model).
  shift
  for dir in "$@"; do
    [ -d "$dir" ] || { echo "bench/predict.sh: $dir is not a directory" >&2; exit 2; }
  done
  medians=$(mktemp)
  trap 'rm -f "$medians"' EXIT
  for dir in "$@"; do
    PREDICT_MEDIANS=$medians bash "${BASH_SOURCE[0]}" --rescore "$dir" || exit $?
  done
  python3 - "$medians" "$T" <<'EOF'
import collections, json, statistics, sys
medians, t = sys.argv[1], float(sys.argv[2])
cells = collections.defaultdict(dict)  # (coll, ranks, transport, size) -> sweep -> median
runs = collections.defaultdict(list)  # (coll, ranks, transport, size) -> every run's ratio
for line in open(medians):
    d = json.loads(line)
    cells[tuple(d["cell"])][d["sweep"]] = statistics.median(d["ratios"])
    runs[tuple(d["cell"])] += d["ratios"]
sweeps = sorted({s for c in cells.values() for s in c})
def inside(m):
    return 1 - t <= m <= 1 + t
print(f"\npooled over {len(sweeps)} sweeps: cells whose median lies outside "
      f"[{1 - t:.2f}, {1 + t:.2f}] in any\n")
print("| collective, ranks, transport, size | outside in | medians, sweep by sweep |")
print("|---|---|---|")
order = ["allreduce", "reduce_scatter", "allgather", "broadcast"]
for k in sorted(cells, key=lambda k: (k[1], order.index(k[0]) if k[0] in order else 9, k[2], k[3])):
    ms = [cells[k].get(s) for s in sweeps]
    out = sum(m is not None and not inside(m) for m in ms)
    if out:
        txt = ", ".join("-" if m is None else f"{m:.2f}" for m in ms)
        print(f"| {k[0]}, {k[1]}, {k[2]}, {k[3] >> 20} MiB | {out} of "
              f"{sum(m is not None for m in ms)} | {txt} |")
print()
for ranks in sorted({k[1] for k in cells}):
    per = [sum(inside(c[s]) for k, c in cells.items() if k[1] == ranks and s in c) for s in sweeps]
    n = [sum(s in c for k, c in cells.items() if k[1] == ranks) for s in sweeps]
    print(f"{ranks} ranks: inside by median per sweep " +
          ", ".join(f"{a}/{b}" for a, b in zip(per, n)) + f"; {sum(per)} of {sum(n)} in all")
# Every run of every sweep together: a cell's median over all of them, the figure that a sweep's
# three runs estimate (one sweep's median of three moves with the host's spells: docs/model.md).
for ranks in sorted({k[1] for k in cells}):
    keys = [k for k in runs if k[1] == ranks]
    off = [k for k in keys if not inside(statistics.median(runs[k]))]
    print(f"{ranks} ranks: inside by the median of every run pooled: {len(keys) - len(off)} of "
          f"{len(keys)}" + (" (outside: " + ", ".join(
              f"{k[0]} {k[2]} {k[3] >> 20} MiB {statistics.median(runs[k]):.2f} of "
              f"{len(runs[k])} runs" for k in off) + ")" if off else ""))
EOF
  exit 0
fi
if [ "${1:-}" = --rescore ]; then
  out=${2:?usage: bench/predict.sh --rescore DIR}
  rescore=$BUILD/strata-repredict
  [ -d "$out" ] || { echo "bench/predict.sh: $out is not a directory" >&2; exit 2; }
  [ -x "$rescore" ] || { echo "bench/predict.sh: $rescore not built" >&2; exit 1; }
  RUNS=$(find "$out" -name '*.txt' | sed 's/.*-\([0-9]*\)\.txt$/\1/' | sort -n | tail -1)
  [ -n "$RUNS" ] || { echo "bench/predict.sh: no runs in $out" >&2; exit 2; }
  echo "# bench/predict.sh --rescore $out with the model of $BUILD"
else
  out=$root/bench/results/predict-$(date -u +%Y%m%d-%H%M%S)
  mkdir -p "$out"
fi
nice_cmd=()
if nice -n -20 true 2>/dev/null; then nice_cmd=(nice -n -20); fi

[ -n "$rescore" ] || echo "# bench/predict.sh $(date -u +%FT%TZ) host $(hostname) cores $(nproc) load $(cut -d' ' -f1-3 /proc/loadavg)"
for run in $(seq 1 "$RUNS"); do
  [ -z "$rescore" ] || break
  for coll in $COLLS; do
    for n in $RANKS; do
      for tr in $TRANSPORTS; do
        shm=$([ "$tr" = shm ] && echo 1 || echo 0)
        f=$out/$coll-$n-$tr-$run.json
        echo "[$(date -u +%H:%M:%S)] run $run $coll $n ranks $tr (load $(cut -d' ' -f1 /proc/loadavg))" >&2
        if ! STRATA_SHM=$shm timeout 300 "${nice_cmd[@]}" "$STRATA" launch -n "$n" -- \
            "$STRATA" bench "$coll" -a 3 -b 1M -e "$MAXBYTES" -f 4 -n "$ITERS" -w 2 --predict \
            -J "$f" >"${f%.json}.txt" 2>&1; then
          echo "bench/predict.sh: $coll $n $tr run $run failed (${f%.json}.txt)" >&2
          rm -f "$f"
        fi
      done
    done
  done
done

# The table: one row per configuration, one cell per size, every run's ratio.
python3 - "$out" "$T" "$RUNS" "$rescore" <<'EOF'
import json, os, subprocess, sys, statistics
out, t, runs, rescore = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
cells = {}  # (coll, n, tr) -> size -> [ratio per run]
measured = {}  # (coll, n, tr, size) -> [measured busbw per run]
def add(coll, n, tr, size, meas, pred):
    if pred and meas > 0:
        cells.setdefault((coll, int(n), tr), {}).setdefault(size, []).append(pred / meas)
        measured.setdefault((coll, int(n), tr, size), []).append(meas)
for name in sorted(os.listdir(out)):
    if rescore and name.endswith(".txt"):  # the rows this run measured, this build's model
        coll, n, tr, _run = name[:-4].rsplit("-", 3)
        got = subprocess.run([rescore, os.path.join(out, name), coll], capture_output=True, text=True)
        if got.returncode != 0:
            sys.exit(f"bench/predict.sh: {name}: {got.stderr.strip()}")
        for line in got.stdout.splitlines():
            size, meas, _printed, pred = line.split()
            add(coll, n, tr, int(size), float(meas), float(pred))
    elif not rescore and name.endswith(".json"):
        coll, n, tr, _run = name[:-5].rsplit("-", 3)
        with open(os.path.join(out, name)) as fh:
            doc = json.load(fh)
        for row in doc["results"]:  # nccl-tests' keys, the model's figure beside them
            add(coll, n, tr, row["size"], row["out_of_place"]["bus_bw"],
                row.get("predicted_bus_bw"))
sizes = sorted({s for c in cells.values() for s in c})
def mib(s):
    return f"{s >> 20} MiB" if s >= 1 << 20 else f"{s >> 10} KiB"
print(f"\npredicted / measured out-of-place busbw (every run), band [{1 - t:.2f}, {1 + t:.2f}]\n")
print("| collective, ranks, transport | " + " | ".join(mib(s) for s in sizes) + " |")
print("|---" * (len(sizes) + 1) + "|")
all_in = med_in = total = 0
for key in sorted(cells, key=lambda k: (["allreduce", "reduce_scatter", "allgather", "broadcast"].index(k[0]) if k[0] in ["allreduce", "reduce_scatter", "allgather", "broadcast"] else 9, k[1], k[2])):
    row = []
    for s in sizes:
        r = cells[key].get(s, [])
        if not r:
            row.append("-")
            continue
        total += 1
        inside = [1 - t <= x <= 1 + t for x in r]
        all_in += all(inside) and len(r) == runs
        med_in += 1 - t <= statistics.median(r) <= 1 + t
        if os.environ.get("PREDICT_MEDIANS"):  # several sweeps re-scored: pooled at the end
            with open(os.environ["PREDICT_MEDIANS"], "a") as fh:
                fh.write(json.dumps({"sweep": out, "cell": [*key, s], "ratios": r}) + "\n")
        txt = ", ".join(f"{x:.2f}" for x in r)
        row.append(txt if all(inside) else f"**{txt}**")
    print(f"| {key[0]}, {key[1]}, {key[2]} | " + " | ".join(row) + " |")
print(f"\n{all_in} of {total} cells inside in every run; {med_in} of {total} by their median")
for ranks in sorted({k[1] for k in cells}):
    sub = [statistics.median(r) for k, c in cells.items() if k[1] == ranks for r in c.values()]
    print(f"{ranks} ranks: {sum(1 - t <= m <= 1 + t for m in sub)} of {len(sub)} by their median")
# How well the measurement agrees with itself: cells whose every run lies within the band
# around the cell's median measurement. No model can be held closer than that.
for ranks in sorted({k[1] for k in cells}):
    own = [all(1 - t <= v / statistics.median(m) <= 1 + t for v in m)
           for k, m in measured.items() if k[1] == ranks and len(m) == runs]
    print(f"{ranks} ranks: the measurement itself: {sum(own)} of {len(own)} cells with every run "
          f"within [{1 - t:.2f}, {1 + t:.2f}] of the cell's median")
    # The model judged where the measurement holds still: of the cells whose runs agree with
    # each other, how many the model's median lies inside.
    steady = [k for k, m in measured.items() if k[1] == ranks and len(m) == runs and
              all(1 - t <= v / statistics.median(m) <= 1 + t for v in m)]
    inside = [k for k in steady if 1 - t <= statistics.median(cells[k[:3]][k[3]]) <= 1 + t]
    out_of = ", ".join(f"{k[0]} {k[2]} {mib(k[3])}" for k in steady if k not in inside)
    print(f"{ranks} ranks: of those {len(steady)} steady cells, {len(inside)} inside by their "
          f"median" + (f" (outside: {out_of})" if out_of else ""))
print(f"raw: {out}")
EOF
