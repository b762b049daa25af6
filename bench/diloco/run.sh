#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/diloco/run.sh [--quick] — the DiLoCo demonstration (docs/diloco.md), one command, root.
#
# A byte-level transformer (bench/diloco/train.py: ~1.9M parameters, f32, CPU, one thread per
# rank) trained on the Python standard library's source (Debian's libpython3.11-*, nothing is
# downloaded) by 2 emulated sites x 1 rank each over `strata netem` (1 Gbit/s, 25 ms each way =
# 50 ms RTT), the same number of tokens and the same batches for every run:
#
#   sync             gradients averaged every step (strata allreduce, f32)
#   diloco-h10       strata.torch.DiLoCo, H = 10
#   diloco-h50       H = 50
#   streaming-h50    Streaming DiLoCo: H = 50, 5 fragments (one starts its exchange every 10
#                    inner steps), each applied 5 inner steps after it starts (the exchange
#                    overlaps those steps' compute), merge alpha = 0.5
#   diloco-h50-int8  H = 50, the outer gradient int8 on the wire
#   diloco-h50-int4  H = 50, int4 on the wire
#   diloco-h50-m09   H = 50 with the DiLoCo paper's outer momentum, 0.9
#   diloco-h10-warm, diloco-h50-warm, streaming-h50-warm
#                    the DiLoCo paper's protocol (arXiv 2311.08105, section 3: DiLoCo starts from
#                    a model pretrained synchronously, 24k of 88k steps): the first quarter of the
#                    steps (100 of 400) synchronous data parallel exactly as the sync run, then
#                    DiLoCo from that model for the rest; the same tokens, batches and learning-
#                    rate schedule as every other run, the warm-up's WAN bytes counted
#
# Every run uses the same inner optimizer (AdamW, lr 2e-3, warm-up then cosine) and the DiLoCo
# runs the paper's outer one (SGD with Nesterov momentum, lr 0.7) except for the momentum: 0.6
# (DILOCO_OUTER_MOMENTUM). The paper's 0.9 suits hundreds of outer steps; a run of this demo has
# 8 at H = 50 (400 inner steps), and there a momentum of 0.9 keeps amplifying the early, large
# outer gradients while the inner learning rate decays (the diloco-h50-m09 row shows the cost).
#
# Per run: final eval loss (held-out files, the final model), WAN bytes sent per site (strata's wan_bytes_sent counter of the site's rank), the
# bytes the emulated WAN carried each way during training (the forwarder's IP byte counters, TCP
# headers and acknowledgements included, as a check independent of strata), wall-clock of
# training. Then a markdown table on stdout, the targets checked, and the plot docs/img/diloco.svg
# (eval loss vs tokens and vs wall-clock).
#
# Raw results: bench/results/diloco/ (one JSON per rank and run, logs, summary.json).
# Environment: BUILD (build dir, default build), DILOCO_STEPS (inner steps per rank, a multiple of
# 50; the -warm runs' synchronous warm-up is 50 x floor(steps / 200) of them, and they are left out
# under 200), DILOCO_RUNS (a subset of the names above, space separated), DILOCO_EXTRA (more
# train.py arguments for every run), DILOCO_OUTER_MOMENTUM (0.6), DILOCO_SVG (the plot's path),
# DILOCO_OUT (the results directory), DILOCO_TEXTBOOK=1 (adds textbook-h50: the pure-Python
# cross-check of DiLoCo, not the library's).
# --quick: a smoke test of the whole pipeline (results and plot in bench/results/diloco-quick/):
# two runs (sync and diloco-h50) of 50 inner steps (one H=50 round), with small evaluations
# (16 checkpoint and 64 final sequences), about a twentieth of the full demo's training. The
# script says what it will run and a rough forecast of its minutes before it starts and, after
# each run, how long the runs took and about how long the rest will take (they cost about the
# same).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_init diloco "$@"
"$py" -c 'import torch' 2>/dev/null ||
  { echo "diloco: $py has no torch (scripts/venv.sh; STRATA_PYTHON=build-venv/bin/python)" >&2; exit 1; }
PYTHONPATH=$build/python "$py" -c 'import strata.torch' ||
  { echo "diloco: $build/python has no strata.torch (build with $py as Python3_EXECUTABLE)" >&2; exit 1; }
blas_slowdown=1 # torch from PyPI brings its own BLAS: against OpenBLAS, for the forecast below

steps=${DILOCO_STEPS:-400}
[ $quick -eq 1 ] && steps=50
if [ $((steps % 50)) -ne 0 ]; then echo "diloco: DILOCO_STEPS must be a multiple of 50" >&2; exit 2; fi
warm=$((50 * (steps / 200))) # a quarter of the run, a whole number of H = 50 rounds after it
runs_default="sync diloco-h10 diloco-h50 streaming-h50 diloco-h50-int8 diloco-h50-int4 diloco-h50-m09"
[ $warm -gt 0 ] && runs_default="$runs_default diloco-h10-warm diloco-h50-warm streaming-h50-warm"
[ $quick -eq 1 ] && runs_default="sync diloco-h50"
runs=${DILOCO_RUNS:-$runs_default}
om=${DILOCO_OUTER_MOMENTUM:-0.6}
[ "${DILOCO_TEXTBOOK:-0}" = 1 ] && runs="$runs textbook-h50"
out=$root/bench/results/diloco
[ $quick -eq 1 ] && out=$root/bench/results/diloco-quick
out=${DILOCO_OUT:-$out}
svg=$root/docs/img/diloco.svg
[ $quick -eq 1 ] && svg=$out/diloco.svg # a smoke test leaves the documented plot alone
svg=${DILOCO_SVG:-$svg}
mkdir -p "$out"
rm -f "$out"/*.json "$out"/*.log

args_of() { # NAME -> train.py arguments of that run
  local dl="--mode diloco --outer-lr 0.7 --outer-momentum $om"
  case $1 in
    sync) echo "--mode sync" ;;
    diloco-h10) echo "$dl --sync-every 10" ;;
    diloco-h50) echo "$dl --sync-every 50" ;;
    streaming-h50) echo "$dl --sync-every 50 --fragments 5 --delay 5 --alpha 0.5" ;;
    diloco-h50-int8) echo "$dl --sync-every 50 --compress int8" ;;
    diloco-h50-int4) echo "$dl --sync-every 50 --compress int4" ;;
    diloco-h50-m09) echo "--mode diloco --outer-lr 0.7 --outer-momentum 0.9 --sync-every 50" ;;
    textbook-h50) echo "$dl --impl textbook --sync-every 50" ;;
    *-warm)
      [ $warm -gt 0 ] || { echo "diloco: $1 needs DILOCO_STEPS of at least 200" >&2; return 1; }
      echo "$(args_of "${1%-warm}") --sync-warmup $warm" ;;
    *) echo "diloco: unknown run $1" >&2; return 1 ;;
  esac
}

netem_up diloco 7200 --sites 2 --ranks-per-site 1 \
  --link '*:rate=1gbit,delay=25ms'
quick_args=()
[ $quick -eq 1 ] && quick_args=(--eval-seqs 16 --final-eval-seqs 64)
read -r -a run_list <<<"$runs"
echo "diloco: 2 sites over strata netem ($name): 1 Gbit/s, 25 ms each way; ${#run_list[@]} runs" \
  "(${run_list[*]}) of $steps inner steps each; results in $out"
# A rough forecast before anything starts: on 2 cores with OpenBLAS a run trains at about 0.25 s
# per inner step (docs/diloco.md's table: 70-120 s for 400 steps) and spends about 15 s more on
# start-up and evaluation; the reference BLAS is about ten times slower.
echo "diloco: expect roughly $(((${#run_list[@]} * (steps / 4 + 15) * blas_slowdown + 59) / 60)) min" \
  "on 2 cores (${blas_slowdown}x the OpenBLAS time); the time left follows each run"
done_runs=0
started_s=$SECONDS

fails=0
for run in $runs; do
  read -r -a targs <<<"$(args_of "$run")"
  port=$((20000 + RANDOM % 20000))
  timeout -k 5 3600 "$strata" netem exec --name "$name" 0 -- \
    "$strata" store --addr "10.77.0.1:$port" >"$out/$run.store.log" 2>&1 &
  store=$!
  pids+=("$store")
  sleep 0.3
  children=()
  for r in 0 1; do
    # shellcheck disable=SC2086
    timeout -k 5 3600 "$strata" netem exec --name "$name" $r -- env PYTHONPATH="$build/python" \
      STRATA_ADDR="10.77.0.1:$port" STRATA_STORE_EXTERNAL=1 STRATA_RANK=$r STRATA_WORLD_SIZE=2 \
      STRATA_JOB_ID="$name-$run" STRATA_SITE="site$r" STRATA_TIMEOUT=600 STRATA_TCP_LINK_GBPS=1 \
      OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
      "$py" "$here/train.py" --name "$run" --steps "$steps" "${targs[@]}" "${quick_args[@]}" ${DILOCO_EXTRA:-} \
      --netem "$name" --strata "$strata" --out "$out/$run.RANK.json" >"$out/$run.$r.log" 2>&1 &
    children+=($!)
    pids+=($!)
  done
  tail -n +1 -f "$out/$run.0.log" --pid "${children[0]}" 2>/dev/null | sed -u 's/^/  /' &
  follower=$!
  rc=0
  for pid in "${children[@]}"; do wait "$pid" || rc=1; done
  wait "$follower" 2>/dev/null || true
  kill "$store" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    echo "diloco: run $run FAILED; the last lines of its ranks' logs:" >&2
    tail -n 5 "$out/$run.0.log" "$out/$run.1.log" >&2 || true
    fails=$((fails + 1))
  fi
  done_runs=$((done_runs + 1))
  spent=$((SECONDS - started_s))
  echo "diloco: $done_runs of ${#run_list[@]} runs done in ${spent} s; about" \
    "$((spent * (${#run_list[@]} - done_runs) / done_runs)) s left"
done

"$py" "$here/report.py" "$out" --runs "$runs" --svg "$svg" || fails=$((fails + 1))
exit $((fails > 0))
