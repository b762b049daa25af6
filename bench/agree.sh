#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/agree.sh — what one strata_comm_agree costs the rendezvous store, by rank count: runs
# bench/agree_scale.c as N processes (TCP only: STRATA_SHM=0, one stream) against one
# `strata store` of this build, which prints the requests it served when it stops; each N
# runs twice, with 0 and with ROUNDS agrees, and the difference over ROUNDS is the store
# requests per agree (init and barriers cancel out). BASELINE=DIR (a strata checkout built in
# DIR/build, e.g. an earlier version) runs its ranks the same way against the same store binary,
# in the same run. Raw logs in bench/results/.
# Environment: BUILD (default build), RANKS (default "16 64 256"), ROUNDS (default 5), BASELINE.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${BUILD:-$root/build}
[[ $BUILD = /* ]] || BUILD=$root/$BUILD
[ -x "$BUILD/strata" ] || { echo "bench/agree.sh: $BUILD/strata not found: build first" >&2; exit 1; }
rounds=${ROUNDS:-5}
out=$root/bench/results/agree-$(date -u +%Y-%m-%d_%H%M%S)
mkdir -p "$out"
ulimit -n "$(ulimit -Hn)"

# the rank program, built against each version's public header and library
versions=("this:$root:$BUILD")
[ -n "${BASELINE:-}" ] && versions+=("baseline:$BASELINE:$BASELINE/build")
for v in "${versions[@]}"; do
  IFS=: read -r name src lib <<<"$v"
  cc -O2 -I"$src/include" "$root/bench/agree_scale.c" -L"$lib" -Wl,-rpath,"$lib" -lstrata \
    -o "$out/agree_scale-$name"
done

# one job: prints the requests the store served
run_job() { # name nranks rounds
  local name=$1 n=$2 r=$3 log=$out/$1-$2-$3
  STRATA_LOG=info STRATA_JOB_ID=agree-bench "$BUILD/strata" store --addr 127.0.0.1:0 \
    >"$log.store.out" 2>"$log.store.err" &
  local store=$!
  local port=""
  for _ in $(seq 1 100); do
    port=$(sed -n 's/.*listening on .*:\([0-9]*\)$/\1/p' "$log.store.out")
    [ -n "$port" ] && break
    sleep 0.05
  done
  local pids=()
  for i in $(seq 0 $((n - 1))); do
    STRATA_RANK=$i STRATA_WORLD_SIZE=$n STRATA_ADDR=127.0.0.1:$port STRATA_STORE_EXTERNAL=1 \
      STRATA_JOB_ID=agree-bench STRATA_SHM=0 STRATA_TCP_STREAMS=1 STRATA_TIMEOUT=120 \
      STRATA_LOG=error "$out/agree_scale-$name" "$r" >>"$log.ranks" 2>&1 &
    pids+=($!)
  done
  local failed=0
  for p in "${pids[@]}"; do wait "$p" || failed=1; done
  kill -TERM "$store"
  wait "$store" || true
  [ $failed = 0 ] || { echo "bench/agree.sh: a rank failed (see $log.ranks)" >&2; echo -1; return; }
  sed -n "s/.*served \([0-9]*\) requests.*/\1/p" "$log.store.out"
}

echo "| version | ranks | store requests per agree | per rank | time per agree |"
echo "|---|---|---|---|---|"
for n in ${RANKS:-16 64 256}; do
  for v in "${versions[@]}"; do
    IFS=: read -r name _ _ <<<"$v"
    base=$(run_job "$name" "$n" 0)
    full=$(run_job "$name" "$n" "$rounds")
    each=$(sed -n 's/.*, \([0-9.]*\) s each/\1/p' "$out/$name-$n-$rounds.ranks")
    python3 -c "import sys; b, f, r, n = map(float, sys.argv[1:5]); per = (f - b) / r
print(f'| $name | {int(n)} | {per:.0f} | {per / n:.1f} | ${each:-?} s |')" "$base" "$full" "$rounds" "$n"
  done
done | tee "$out/table.md"
