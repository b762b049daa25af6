#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/scale.sh — how strata starts as the job grows, beside OpenMPI (tcp BTL) and Gloo, on this
# host, with processes and TCP only (STRATA_SHM=0): for each rank count, the time to join (init),
# the first 4-byte allreduce, the descriptors and the memory each rank holds afterwards.
#
#   bench/scale.sh [--sizes "8 16 32 64 128 256"] [--systems strata,openmpi,gloo,strata-counted]
#                  [--timeout S] [--out DIR] [--quick] [--help]
#
# strata:          strata launch -n N -- scale_rank DIR           (bench/scale_rank.c)
# openmpi:         mpirun --allow-run-as-root --oversubscribe --mca btl self,tcp
#                  --mca btl_tcp_if_include lo -np N scale_rank_mpi DIR   (the same program, MPI)
# gloo:            strata launch -n N -- python bench/scale_gloo.py DIR (torch's env:// store)
# strata-counted:  scale_rank -c: the same join through a store that counts the library's
#                  requests and bytes (what src/model/startup.c predicts)
# strata-1stream:  strata with STRATA_TCP_STREAMS=1 (2 connections per pair instead of 5): with
#                  the others, calibrates the model's per-connection and per-request costs
#                  (not in the default --systems)
#
# Results go to DIR (default bench/results/scale-<date>): runs.tsv, raw/<system>-<N>/<rank>.txt,
# scale.csv, scale.json, scale.svg (bench/scale_report.py), and the table on stdout.
# BUILD (default build/) is the strata build measured; STRATA_PYTHON a python with torch (default
# build-venv/bin/python, else python3). Each run is bounded (--timeout, default 120 + 3 s per
# rank) and everything it started is killed after it; a size is skipped when the memory it needs
# (the previous size's per-rank peak less shared pages, times N) is not available, and a system
# that timed out at one size is not run at larger ones (one that failed is: the failure may be
# load). Raises the descriptor limit to its hard limit; STRATA_TIMEOUT (default here 120) bounds
# each rank's init.
# Timings on a shared or busy host are noisy: compare systems within one run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
sizes="8 16 32 64 128 256"
systems="strata,openmpi,gloo,strata-counted"
timeout_s=""
out=""
while [ $# -gt 0 ]; do
  case $1 in
    --sizes) sizes=$2; shift 2 ;;
    --systems) systems=$2; shift 2 ;;
    --timeout) timeout_s=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --quick) sizes="8 16"; shift ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "scale: unknown argument $1 (--help)" >&2; exit 2 ;;
  esac
done
build=$(cd "${BUILD:-$root/build}" 2>/dev/null && pwd) ||
  { echo "scale: build dir ${BUILD:-build} is missing (make first)" >&2; exit 1; }
strata=$build/strata
[ -x "$strata" ] || { echo "scale: $strata is missing (make first)" >&2; exit 1; }
py=${STRATA_PYTHON:-}
[ -z "$py" ] && [ -x "$root/build-venv/bin/python" ] && py=$root/build-venv/bin/python
py=${py:-python3}
out=${out:-$root/bench/results/scale-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$out/raw" "$out/tools"
out=$(cd "$out" && pwd)

ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
echo "scale: descriptor limit $(ulimit -n), $(nproc) CPUs, build $build, results $out"

# ---- the rank programs ----
gcc -std=gnu11 -O2 -Wall -Wextra -I"$root/include" "$here/scale_rank.c" -o "$out/tools/scale_rank" \
  -L"$build" -lstrata -Wl,-rpath,"$build" -lpthread
have_mpi=0
if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then
  mpicc -std=gnu11 -O2 -Wall -Wextra -DSCALE_MPI "$here/scale_rank.c" -o "$out/tools/scale_rank_mpi"
  have_mpi=1
fi
have_torch=0
"$py" -c "import torch.distributed" 2>/dev/null && have_torch=1

export STRATA_SHM=0          # TCP only: the transport whose connections scale with the job
# every rendezvous step waits for the slowest of N starting processes on few cores; a rank that
# still cannot join fails with its own message well before the run's bound
export STRATA_TIMEOUT=${STRATA_TIMEOUT:-120}
export STRATA_LOG=error
root_flag=()
[ "$(id -u)" -eq 0 ] && root_flag=(--allow-run-as-root)

# ---- one run: bounded, and nothing it started outlives it ----
current=""
kill_leftovers() { # every process whose command line names this run's directory
  [ -n "$current" ] || return 0
  local pid
  for pid in $(pgrep -f -- "$current" || true); do
    [ "$pid" != $$ ] && kill -9 "$pid" 2>/dev/null || true
  done
}
trap 'kill_leftovers' EXIT
trap 'kill_leftovers; exit 130' INT TERM

mem_available_kb() { awk '/^MemAvailable:/ {print $2}' /proc/meminfo; }
declare -A peak_kb=([strata]=65536 [strata-counted]=65536 [strata-1stream]=65536 [openmpi]=65536 [gloo]=262144)
declare -A failed=()
printf 'system\tranks\tstatus\twall_s\tlaunch_epoch_s\tnote\n' >"$out/runs.tsv"

run_one() { # system N
  local system=$1 n=$2 dir="$out/raw/$1-$2" limit=${timeout_s:-$((120 + 3 * $2))} cmd=()
  mkdir -p "$dir"
  case $system in
    strata) cmd=("$strata" launch -n "$n" -- "$out/tools/scale_rank" "$dir") ;;
    strata-counted) cmd=("$strata" launch -n "$n" -- "$out/tools/scale_rank" -c "$dir") ;;
    strata-1stream) cmd=(env STRATA_TCP_STREAMS=1 "$strata" launch -n "$n" --
                         "$out/tools/scale_rank" "$dir") ;;
    openmpi) cmd=(mpirun "${root_flag[@]}" --oversubscribe --mca btl self,tcp
                  --mca btl_tcp_if_include lo -np "$n" "$out/tools/scale_rank_mpi" "$dir") ;;
    gloo) cmd=("$strata" launch -n "$n" -- "$py" "$here/scale_gloo.py" "$dir") ;;
  esac
  local need_kb=$((${peak_kb[$system]} * n)) avail_kb note="" status wall start rc=0
  avail_kb=$(mem_available_kb)
  if [ -n "${failed[$system]:-}" ]; then
    printf '%s\t%d\tskipped\t\t\t%s\n' "$system" "$n" "timed out at ${failed[$system]} ranks" >>"$out/runs.tsv"
    return
  fi
  if [ "$need_kb" -gt $((avail_kb * 3 / 4)) ]; then
    note="needs ~$((need_kb / 1024)) MiB, $((avail_kb / 1024)) MiB available"
    printf '%s\t%d\tskipped\t\t\t%s\n' "$system" "$n" "$note" >>"$out/runs.tsv"
    echo "scale: $system $n ranks skipped: $note"
    return
  fi
  current=$dir
  start=$(date +%s.%N)
  timeout -k 20 "$limit" "${cmd[@]}" >"$dir.log" 2>&1 || rc=$?
  wall=$(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN{printf "%.3f", e - s}')
  kill_leftovers
  current=""
  local reported
  reported=$(find "$dir" -name '*.txt' | wc -l)
  if [ $rc -eq 0 ] && [ "$reported" -eq "$n" ]; then status=ok
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then status=timeout; note="after ${limit} s"
  else status=failed; note="exit $rc, $reported of $n ranks reported; see raw/$system-$n.log"
  fi
  [ "$status" = timeout ] && failed[$system]=$n
  # a rank's peak, less what it shares with the others (mapped libraries: RSS - PSS), is what
  # one more rank costs
  local need
  need=$(awk '{ v = $9 - ($8 - $10); if (v > m) m = v } END { print int(m) }' "$dir"/*.txt \
    2>/dev/null || echo 0)
  [ "${need:-0}" -gt 0 ] && peak_kb[$system]=$((need * 5 / 4))
  local tw
  tw=$(ss -Htan state time-wait 2>/dev/null | wc -l || echo "?")
  printf '%s\t%d\t%s\t%s\t%s\t%s\n' "$system" "$n" "$status" "$wall" "$start" \
    "${note}${note:+; }${tw} in TIME_WAIT after" >>"$out/runs.tsv"
  echo "scale: $system $n ranks: $status in ${wall} s ${note:+($note)}"
}

for n in $sizes; do
  IFS=, read -r -a chosen <<<"$systems"
  for system in "${chosen[@]}"; do
    case $system in
      strata | strata-counted | strata-1stream) run_one "$system" "$n" ;;
      openmpi) if [ $have_mpi -eq 1 ]; then run_one openmpi "$n"
               else echo "scale: no mpicc/mpirun (scripts/deps.sh bench): openmpi skipped"; fi ;;
      gloo) if [ $have_torch -eq 1 ]; then run_one gloo "$n"
            else echo "scale: $py has no torch (STRATA_PYTHON, scripts/venv.sh): gloo skipped"; fi ;;
      *) echo "scale: unknown system $system" >&2; exit 2 ;;
    esac
  done
done
if [ -x "$build/strata-scale-model" ]; then # the start-up model beside the measurement
  # shellcheck disable=SC2086
  "$build/strata-scale-model" --cores "$(nproc)" $sizes >"$out/model.csv"
fi
python3 "$here/scale_report.py" "$out"
echo "scale: $out/scale.csv, scale.json, scale.svg"
