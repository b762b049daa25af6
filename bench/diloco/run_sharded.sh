#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/diloco/run_sharded.sh [--quick] — DiLoCo at the sharded shape (docs/diloco.md, "Sharded
# sites"), root: 2 emulated sites x 2 ranks over `strata netem` (1 Gbit/s, 25 ms each way), FSDP2
# inside each site, train.py's byte-level transformer and corpus (bench/diloco/train_sharded.py),
# the same tokens and batches for every run:
#
#   sync             synchronous HSDP: every step's gradients averaged across the sites
#   diloco-h50       strata.torch.DiLoCo over the shards, H = 50 (one communicator per shard
#                    index across the sites)
#   diloco-h50-int8  the same, the outer gradient int8 on the wire
#   streaming-h50    H = 50, 5 fragments, delay 5, alpha 0.5
#   diloco-h50-kill  diloco-h50 with site 1 SIGKILLed a third of the way in and started again
#                    (join) at two thirds: site 0 goes on alone, then admits it
#
# Per run and site: the final eval loss, WAN bytes (strata's counter of the site's shard
# communicators, and the emulator's IP counters), wall-clock; bench/diloco/report.py draws the
# table and the plot (eval loss against tokens and wall-clock; the -kill run beside diloco-h50).
# Raw results: bench/results/diloco-sharded/. Environment: BUILD, DILOCO_STEPS (450; a multiple
# of 150 for the -kill run, whose thirds fall on site 0's evaluations), DILOCO_RUNS, DILOCO_EXTRA (more train_sharded.py
# arguments), DILOCO_SVG. --quick: 150 steps, a smoke test of the pipeline.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_init diloco-sharded "$@"
"$py" -c 'import torch' 2>/dev/null ||
  { echo "diloco: $py has no torch (scripts/venv.sh; STRATA_PYTHON=build-venv/bin/python)" >&2; exit 1; }
PYTHONPATH=$build/python "$py" -c 'import strata.torch' ||
  { echo "diloco: $build/python has no strata.torch (build with $py as Python3_EXECUTABLE)" >&2; exit 1; }

steps=${DILOCO_STEPS:-450}
[ $quick -eq 1 ] && steps=150
runs=${DILOCO_RUNS:-sync diloco-h50 diloco-h50-int8 streaming-h50 diloco-h50-kill}
case " $runs " in
  *" diloco-h50-kill "*)
    [ $((steps % 150)) -eq 0 ] ||
      { echo "diloco-sharded: DILOCO_STEPS=$steps: the -kill run wants a multiple of 150" >&2; exit 2; } ;;
esac
out=$root/bench/results/diloco-sharded
[ $quick -eq 1 ] && out=$root/bench/results/diloco-sharded-quick
svg=${DILOCO_SVG:-$out/diloco-sharded.svg}
mkdir -p "$out"
for run in $runs; do rm -f "$out/$run".*; done  # the other runs' results stay, for the report

args_of() {
  local dl="--mode diloco --outer-lr 0.7 --outer-momentum 0.6 --sync-every 50"
  case $1 in
    sync) echo "--mode sync" ;;
    diloco-h50 | diloco-h50-kill) echo "$dl" ;;
    diloco-h50-int8) echo "$dl --compress int8" ;;
    streaming-h50) echo "$dl --fragments 5 --delay 5 --alpha 0.5" ;;
    *) echo "diloco: unknown run $1" >&2; return 1 ;;
  esac
}

netem_up dlsh 7200 --sites 2 --ranks-per-site 2 \
  --link '*:rate=1gbit,delay=25ms'
echo "diloco-sharded: 2 sites x 2 ranks over strata netem ($name): 1 Gbit/s, 25 ms each way; $steps inner steps per run; results in $out"

# the job's secret: every strata connection between the sites is authenticated with it
secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')

rank() { # SITE LOCAL RUN [more train_sharded.py arguments]: one rank in its site's namespace
  local s=$1 l=$2 run=$3
  shift 3
  read -r -a targs <<<"$(args_of "$run")"
  # shellcheck disable=SC2086
  timeout -k 5 3600 "$strata" netem exec --name "$name" "$s" -- env PYTHONPATH="$build/python" \
    STRATA_SITE="site$s" STRATA_SECRET="$secret" STRATA_TCP_LINK_GBPS=1 OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
    "$py" "$here/train_sharded.py" --name "$run" --steps "$steps" --store "10.77.0.1:$port" \
    --job "$name" --site "$s" --local "$l" --sites 2 --ranks-per-site 2 "${targs[@]}" \
    ${DILOCO_EXTRA:-} --netem "$name" --strata "$strata" --out "$out/$run.SITE.json" "$@"
}

fails=0
for run in $runs; do
  port=$((20000 + RANDOM % 20000))
  timeout -k 5 3600 "$strata" netem exec --name "$name" 0 -- env PYTHONPATH="$build/python" \
    "$py" "$here/train_sharded.py" --serve-store "10.77.0.1:$port" >"$out/$run.store.log" 2>&1 &
  store=$!
  pids+=("$store")
  for _ in $(seq 100); do grep -q "^store on" "$out/$run.store.log" && break; sleep 0.2; done
  if ! grep -q "^store on" "$out/$run.store.log"; then
    echo "diloco-sharded: the store of run $run did not start:" >&2
    cat "$out/$run.store.log" >&2
    exit 1
  fi
  children=()
  for s in 0 1; do
    for l in 0 1; do
      extra=()
      [ "$run" = diloco-h50-kill ] && [ $s -eq 1 ] && extra=(--die-at $((steps / 3)))
      rank $s $l "$run" "${extra[@]}" >"$out/$run.$s$l.log" 2>&1 &
      pid=$!
      pids+=("$pid")
      # site 1's first incarnation dies on purpose (SIGKILL): its status is not the run's
      if [ "$run" = diloco-h50-kill ] && [ $s -eq 1 ]; then continue; fi
      children+=("$pid")
    done
  done
  if [ "$run" = diloco-h50-kill ]; then
    # site 1 comes back two thirds of the way in (site 0's log says when) and joins
    # (site 0 prints its step at every evaluation: train_sharded.py --eval-every divides it)
    until grep -q "step $((2 * steps / 3))/" "$out/$run.00.log" 2>/dev/null; do
      if ! kill -0 "${children[0]}" 2>/dev/null; then
        echo "diloco-sharded: site 0 ended before step $((2 * steps / 3)), where site 1 restarts" >&2
        break
      fi
      sleep 0.5
    done
    for l in 0 1; do
      rank 1 $l "$run" --join --incarnation 1 >"$out/$run.1$l.rejoin.log" 2>&1 &
      children+=($!)
      pids+=($!)
    done
  fi
  tail -n +1 -f "$out/$run.00.log" --pid "${children[0]}" 2>/dev/null | sed -u 's/^/  /' &
  follower=$!
  rc=0
  for pid in "${children[@]}"; do wait "$pid" || rc=1; done
  wait "$follower" 2>/dev/null || true
  kill "$store" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "diloco-sharded: run $run FAILED; the last lines of its logs:" >&2
    tail -n 5 "$out/$run".*.log >&2 || true
    fails=$((fails + 1))
  fi
done

# the report covers every run of the directory, those of earlier invocations included
all_runs=""
for r in sync diloco-h50 diloco-h50-int8 streaming-h50 diloco-h50-kill; do
  [ -e "$out/$r.0.json" ] && all_runs="$all_runs $r"
done
"$py" "$here/report.py" "$out" --runs "${all_runs# }" --svg "$svg" --informative ||
  fails=$((fails + 1))
# the planner beside what the runs measured (4 ranks sharing this host's cores: the codec's share)
rank_cores=$(awk -v n="$(nproc)" 'BEGIN { s = n / 4; print (s < 1 ? s : 1) }')
PYTHONPATH=$build/python "$py" "$here/plan_vs_demo.py" "$out" "$here/links-2x2-1gbit-25ms.json" \
  "$strata" "$(PYTHONPATH=$build/python "$py" "$here/plan_check.py" --shapes)" "$rank_cores" ||
  fails=$((fails + 1))
exit $((fails > 0))
