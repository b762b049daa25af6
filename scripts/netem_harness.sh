#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# netem_harness.sh — run one strata job as K sites × M ranks over an emulated WAN, then remove
# everything (namespaces, TUN devices, forwarder, store, ranks), also when interrupted.
#
#   scripts/netem_harness.sh --sites K --ranks-per-site M [--link SPEC]... [--up-opt OPTION]...
#                            [--name NAME] [--timeout SECONDS] [--strata BIN] -- CMD ARGS...
#
# Site k is namespace NAME-sk at 10.77.k.1 (`strata netem up`, docs/netem.md). A standalone
# store (`strata store`) listens in site 0 on 10.77.0.1, so rendezvous crosses the WAN too.
# Rank r = k*M + m runs CMD inside site k with STRATA_RANK, STRATA_WORLD_SIZE, STRATA_LOCAL_RANK,
# STRATA_ADDR, STRATA_STORE_EXTERNAL=1, STRATA_JOB_ID, STRATA_SECRET, STRATA_HOST=10.77.k.1 and
# STRATA_NETEM_SITE=k. The exit status is the first failing rank's (0 if all succeed); every
# rank is bounded by --timeout (default 120 s). Needs root.
set -uo pipefail
sites=2 per_site=1 name="nh$$" limit=120 strata=""
links=() up_opts=()
while [ $# -gt 0 ]; do
  case $1 in
    --sites) sites=$2; shift 2 ;;
    --ranks-per-site) per_site=$2; shift 2 ;;
    --link) links+=(--link "$2"); shift 2 ;;
    --up-opt) up_opts+=("$2"); shift 2 ;;
    --name) name=$2; shift 2 ;;
    --timeout) limit=$2; shift 2 ;;
    --strata) strata=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "netem_harness: unknown option '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
[ $# -gt 0 ] || { echo "netem_harness: no command after --" >&2; exit 2; }
[[ $sites =~ ^[0-9]+$ && $per_site =~ ^[0-9]+$ && $limit =~ ^[0-9]+$ ]] ||
  { echo "netem_harness: --sites, --ranks-per-site and --timeout take numbers" >&2; exit 2; }
[ "$per_site" -ge 1 ] && [ "$per_site" -le 64 ] ||
  { echo "netem_harness: --ranks-per-site must be 1..64" >&2; exit 2; }
strata=${strata:-${STRATA_BIN:-$(command -v strata || echo build/strata)}}
[ -x "$strata" ] || { echo "netem_harness: no strata binary at '$strata' (--strata BIN)" >&2; exit 2; }

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  sleep 0.2
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null; done
  "$strata" netem down --name "$name" >/dev/null 2>&1
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

"$strata" netem up --name "$name" --sites "$sites" --ranks-per-site "$per_site" \
  --lifetime $((limit + 60)) "${links[@]}" "${up_opts[@]}" >/dev/null || exit 1

port=$((20000 + $$ % 20000))
job="netem-$name-$(od -An -tx1 -N4 /dev/urandom | tr -d ' \n')"
secret=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
# the store admits only connections that prove the ranks' secret
STRATA_JOB_ID=$job STRATA_SECRET=$secret timeout -k 2 $((limit + 10)) \
  "$strata" netem exec --name "$name" 0 -- "$strata" store --addr "10.77.0.1:$port" >/dev/null 2>&1 &
pids+=($!)
for _ in $(seq 100); do # the store is up once site 0 can connect to it
  "$strata" netem exec --name "$name" 0 -- bash -c "exec 3<>/dev/tcp/10.77.0.1/$port" 2>/dev/null && break
  sleep 0.05
done

world=$((sites * per_site))
declare -A rank_of
for ((k = 0; k < sites; k++)); do
  for ((m = 0; m < per_site; m++)); do
    r=$((k * per_site + m))
    STRATA_RANK=$r STRATA_WORLD_SIZE=$world STRATA_LOCAL_RANK=$m STRATA_ADDR="10.77.0.1:$port" \
      STRATA_STORE_EXTERNAL=1 STRATA_JOB_ID=$job STRATA_SECRET=$secret \
      timeout -k 2 "$limit" "$strata" netem exec --name "$name" "$k" -- "$@" &
    pids+=($!)
    rank_of[$!]=$r
  done
done

status=0
while [ ${#rank_of[@]} -gt 0 ]; do
  for pid in "${!rank_of[@]}"; do
    kill -0 "$pid" 2>/dev/null && continue
    wait "$pid"
    rc=$?
    if [ "$rc" -ne 0 ] && [ "$status" -eq 0 ]; then
      status=$rc
      echo "netem_harness: rank ${rank_of[$pid]} exited with $rc; stopping the others" >&2
      for other in "${!rank_of[@]}"; do kill -TERM "$other" 2>/dev/null; done
    fi
    unset "rank_of[$pid]"
  done
  sleep 0.05
done
exit "$status"
