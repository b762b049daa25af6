#!/usr/bin/env bash
# make demo: strata working in under a minute — four local ranks run and check every collective,
# a short nccl-tests style benchmark, then the planner draws one cluster map.
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
if [ -x scripts/demo_plan.sh ]; then
  echo "== 3. the planner: a 2-site metro cluster, its layers, decision and lints"
  scripts/demo_plan.sh "$build"
fi
