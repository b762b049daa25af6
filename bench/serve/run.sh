#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/serve/run.sh [--quick] — strata.serve on 3 emulated sites (docs/serving.md), root.
#
# `strata netem` sites s0, s1, s2 (one-way delays 0-1 10 ms, 0-2 20 ms, 1-2 15 ms: round trips
# 20, 40, 30 ms); the store and the router run at s0, the pipeline's client at s1. The model is strata.tinylm
# (8 blocks); every server pads a whole-model step to TOKEN_MS (20 ms, the planner's default
# --token-ms) in proportion to the blocks it holds, as an accelerator of that speed would.
#
#   pipeline  span servers s0 [0:3), s1 [3:6), s2 [6:8) and a 3x slower standby for [3:6) at
#             s1; the client generates 64 tokens: per-token p50/p99 and tokens/s, next to
#             `strata plan --workload inference --cross-site-pipeline` for
#             bench/serve/sites3.yaml (the same round trips); then again killing p1 after 24
#             tokens (failover to the standby, 24 steps replayed; the tokens are checked)
#   replicas  a full replica at each site; `python3 -m strata.serve load` (router + open-loop
#             Poisson arrivals, 8 tokens a request) at RATES requests/s for DURATION s each,
#             then again killing the s1 replica 40% of the way in; lost requests must be 0
#
# Raw results: bench/results/serve/ (pipeline.jsonl, load.jsonl, logs, plan.txt); the plot
# docs/img/serving.svg (bench/serve/plot.py). Environment: BUILD (build dir), RATES, DURATION,
# TOKEN_MS. --quick: two rates of 4 s, results and plot in bench/results/serve-quick/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../common.sh"
bench_init serve "$@"
PYTHONPATH=$build/python "$py" -c 'import torch, strata.serve' ||
  { echo "serve: $py cannot import torch and strata.serve from $build/python" >&2; exit 1; }

token_ms=${TOKEN_MS:-20}
rates=${RATES:-2 5 10 15 20}
duration=${DURATION:-10}
out=$root/bench/results/serve
svg=$root/docs/img/serving.svg
if [ $quick -eq 1 ]; then
  rates="2 8"; duration=4; out=$root/bench/results/serve-quick; svg=$out/serving.svg
fi
mkdir -p "$out"
rm -f "$out"/*.jsonl "$out"/*.log "$out"/*.pid
secret=serve-bench-$$
netem_up serve 3600 --sites 3 --ranks-per-site 1 \
  --link '0-1:delay=10ms' --link '0-2:delay=20ms' --link '1-2:delay=15ms'
echo "serve: 3 sites over strata netem ($name): RTT 0-1 20 ms, 0-2 40 ms, 1-2 30 ms; results in $out"

at() { # SITE CMD...: run in that site with the package on the path, one thread for torch
  local site=$1
  shift
  "$strata" netem exec --name "$name" "$site" -- env PYTHONPATH="$build/python" \
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$@"
}
port=$((20000 + RANDOM % 20000))
store=10.77.0.1:$port
at 0 "$py" -m strata.serve store --addr "$store" --secret "$secret" --job pipe >"$out/store-pipe.log" 2>&1 &
pids+=($!)
at 0 "$py" -m strata.serve store --addr "10.77.0.1:$((port + 1))" --secret "$secret" --job load \
  >"$out/store-load.log" 2>&1 &
pids+=($!)
sleep 1
common=(--secret "$secret" --timeout 10)

# ---- pipeline ----
spans=("0:3" "3:6" "6:8")
for s in 0 1 2; do
  a=${spans[$s]%:*}
  b=${spans[$s]#*:}
  pad=$("$py" -c "print($token_ms * ($b - $a) / 8)")
  at "$s" "$py" -m strata.serve server --store "$store" "${common[@]}" --job pipe --name "p$s" \
    --span "${spans[$s]}" --token-ms "$pad" --listen-host "10.77.$s.1" --pid-file "$out/p$s.pid" \
    >"$out/p$s.log" 2>&1 &
  pids+=($!)
done
# A standby for s1's span at s1, three times slower: routes avoid it until p1 dies.
at 1 "$py" -m strata.serve server --store "$store" "${common[@]}" --job pipe --name b1 \
  --span 3:6 --token-ms "$("$py" -c "print(3 * $token_ms * 3 / 8)")" --listen-host 10.77.1.1 \
  >"$out/b1.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do # until all four have announced themselves
  if at 0 "$py" -m strata.serve route --store "$store" "${common[@]}" --job pipe --pings 1 \
    --expect 4 >"$out/route.log" 2>&1; then break; fi
  sleep 1
done
cat "$out/route.log"
# The client at s1, where `strata plan` places it (the site whose round trips to the others sum
# least: 20 + 30 ms).
at 1 "$py" -m strata.serve generate --store "$store" "${common[@]}" --job pipe --tokens 64 \
  --check --json "$out/pipeline.jsonl" | tee "$out/generate.log"
# The same with p1 killed after 24 tokens: the client fails over to b1 and replays 24 steps.
at 1 "$py" -m strata.serve generate --store "$store" "${common[@]}" --job pipe --tokens 64 \
  --check --json "$out/pipeline.jsonl" --kill-pid-file "$out/p1.pid" --kill-after-tokens 24 |
  tee "$out/generate-kill.log"
"$strata" plan "$here/sites3.yaml" --workload inference --cross-site-pipeline \
  --token-ms "$token_ms" | tee "$out/plan.txt"

# ---- replicas ----
lstore=10.77.0.1:$((port + 1))
start_replica() { # SITE
  at "$1" "$py" -m strata.serve replica --store "$lstore" "${common[@]}" --job load \
    --name "r$1" --token-ms "$token_ms" --listen-host "10.77.$1.1" \
    --pid-file "$out/r$1.pid" >>"$out/r$1.log" 2>&1 &
  pids+=($!)
}
for s in 0 1 2; do start_replica "$s"; done
sleep 5
fails=0
kill_at=$("$py" -c "print($duration * 0.4)")
for rate in $rates; do
  for kill in no yes; do
    args=(--rate "$rate" --duration "$duration" --replicas 3 --json "$out/load.jsonl")
    [ "$kill" = yes ] && args+=(--kill-pid-file "$out/r1.pid" --kill-at "$kill_at")
    echo "serve: rate $rate/s, kill $kill"
    at 0 "$py" -m strata.serve load --store "$lstore" "${common[@]}" --job load "${args[@]}" ||
      { echo "serve: requests were lost at rate $rate (kill $kill)" >&2; fails=$((fails + 1)); }
    if [ "$kill" = yes ]; then
      rm -f "$out/r1.pid"
      start_replica 1
      for _ in $(seq 60); do [ -s "$out/r1.pid" ] && break; sleep 0.5; done
      sleep 5 # its model made and announced
    fi
  done
done
"$py" "$here/plot.py" "$out/load.jsonl" "$svg"
echo "serve: plot $svg"
exit $fails
