#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make demo: strata working in under a minute — four local ranks run and check every collective
# (warm figures, as strata bench measures them), a short nccl-tests style benchmark over TCP, the
# peers beside strata (from the last `make bench`, else a short live run against OpenMPI when it
# is installed), the planner draws one cluster map, and layer 4 runs: a DiLoCo outer step and a
# weight patch between local ranks, each checked.
set -euo pipefail
build=${1:-build}
bin="$build/strata"
cd "$(dirname "$0")/.."
echo "== 1. every collective on 4 local ranks (shared memory), every element checked"
timeout 120 "$bin" launch -n 4 -- "$bin" demo
echo
echo "== 2. the same over TCP only (STRATA_SHM=0), allreduce bus bandwidth like nccl-tests"
STRATA_SHM=0 timeout 120 "$bin" launch -n 2 -- "$bin" bench allreduce -b 8 -e 64M -f 8 -n 5 -w 2
echo

# The demo's allreduce sizes (8 B, 128 KiB, 16 MiB on 4 ranks) in the last make bench report.
last_report() {
  local report=$1
  echo "== 3. beside the peers: the last 'make bench' ($(basename "$report"), 4 ranks, shared memory)"
  awk '/^== / { in4 = ($0 ~ /shared memory, 4 ranks/) }
       in4 && /^ +size \|/ { print "  " $0 }
       in4 && /^ +(8 B|128 KiB|16 MiB) \|/ { print "  " $0 }' "$report"
  echo "  (time in us and busbw in GB/s, in place; ratios = strata busbw / peer busbw; full report:"
  echo "   $report; it was measured on the machine that ran it, at its commit and load)"
}

# No report: strata bench and OpenMPI's MPI_Allreduce (bench/mpi_allreduce.c, the same method)
# on 4 ranks here, a few sizes each, in-place bus bandwidth side by side.
live_peer() {
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  echo "== 3. beside a peer: strata and OpenMPI allreduce, 4 ranks, shared memory, live and short"
  mpicc -std=gnu11 -O2 bench/mpi_allreduce.c -o "$tmp/mpi_allreduce" 2>"$tmp/cc.err" ||
    { echo "  (mpicc failed: $(tail -1 "$tmp/cc.err"))"; return 0; }
  local sizes=(-b 8 -e 16M -f 8 -n 5 -w 1)
  # -a 3: the slowest rank's time, which is what mpi_allreduce reports
  timeout 120 "$bin" launch -n 4 -- "$bin" bench allreduce "${sizes[@]}" -a 3 >"$tmp/strata.txt" ||
    { echo "  (strata bench failed)"; return 0; }
  timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 \
    "$tmp/mpi_allreduce" "${sizes[@]}" >"$tmp/mpi.txt" 2>"$tmp/mpi.err" ||
    { echo "  (mpirun failed: $(tail -1 "$tmp/mpi.err"))"; return 0; }
  # in place: time is column 10, busbw column 12 of a nccl-tests row, in both outputs
  awk 'FNR == 1 { file++ }
       /^ *[0-9]/ { us[file, $1] = $10; bw[file, $1] = $12; if (file == 1) sizes[++n] = $1 }
       END { printf "  %10s  %9s %7s  %9s %7s  %s\n", "size (B)", "strata us", "busbw",
                    "MPI us", "busbw", "strata speed / MPI"
             for (i = 1; i <= n; i++) { s = sizes[i]
               ratio = (us[1, s] > 0 && us[2, s] > 0) ? sprintf("%.2fx", us[2, s] / us[1, s]) : "-"
               printf "  %10s  %9s %7s  %9s %7s  %s\n", s, us[1, s], bw[1, s], us[2, s], bw[2, s],
                      ratio } }' \
    "$tmp/strata.txt" "$tmp/mpi.txt"
  echo "  (us and GB/s; five calls a size on a shared machine: a glimpse, not a benchmark; 'sudo make"
  echo "   bench' measures strata, OpenMPI and Gloo properly and make demo then shows its report)"
}

report=$(ls -t bench/results/*.txt 2>/dev/null | head -1 || true)
if [ -n "$report" ]; then
  last_report "$report"
elif command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  live_peer
else
  echo "== 3. beside the peers: no 'make bench' report yet. 'sudo make bench' (about 15 minutes;"
  echo "   OpenMPI and torch, which scripts/deps.sh bench installs) compares strata with OpenMPI"
  echo "   and Gloo, and make demo then shows that comparison here."
fi
echo

if [ -x scripts/demo_plan.sh ]; then
  echo "== 4. the planner: a 2-site metro cluster, its layers, decision and lints"
  scripts/demo_plan.sh "$build"
fi
echo

echo "== 5. layer 4: a DiLoCo outer step and an RL weight patch between 4 local ranks, checked"
timeout 60 "$bin" launch -n 4 -- "$bin" demo layer4
