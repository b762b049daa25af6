#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/encrypt.sh — what sealing TCP frames costs (docs/security.md): a 2-rank float allreduce,
# 16 MiB to 256 MiB, with STRATA_ENCRYPT=on against STRATA_ENCRYPT=off, interleaved run by run,
#   1. on loopback (STRATA_SHM=0: both ranks on this host, the worst case: nothing but memory
#      bandwidth to hide the cipher behind, and both ranks' ciphers share this host's cores);
#   2. across two `strata netem` sites joined by 1 Gbit/s with 25 ms each way (50 ms RTT), when
#      run as root (namespaces it creates and removes);
# and the cipher's own speed on one core (`strata bench --cipher`, OpenSSL's AES-256-GCM and
# ChaCha20-Poly1305). Prints a table of medians and the sealed/clear ratio per size.
# Environment: BUILD (default build), ENC_REPEAT (rounds, default 3), ENC_SKIP_WAN=1.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
BUILD=${BUILD:-$root/build}
[[ $BUILD = /* ]] || BUILD=$root/$BUILD
STRATA=$BUILD/strata
PY=${STRATA_PYTHON:-/usr/bin/python3}
REPEAT=${ENC_REPEAT:-3}
[ -x "$STRATA" ] || { echo "bench/encrypt.sh: $STRATA not found: build first" >&2; exit 1; }
out=$root/bench/results/encrypt-$(date -u +%Y-%m-%d_%H%M%S)
mkdir -p "$out"
name=enc$$
cleanup() { "$STRATA" netem down --name "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT

# one_run WHERE MODE ROUND: JSON of one bench run in $out
one_run() {
  local where=$1 mode=$2 round=$3 json=$out/$1-$2-$3.json
  if [ "$where" = loopback ]; then
    STRATA_SHM=0 STRATA_ENCRYPT=$mode STRATA_TIMEOUT=120 timeout -k 2 600 \
      "$STRATA" launch -n 2 -- "$STRATA" bench allreduce -b 16M -e 256M -f 4 -n 5 -w 1 \
      -J "$json" >"$out/$1-$2-$3.log" 2>&1
  else
    local port=$((20000 + RANDOM % 20000)) pids=() rc=0
    for r in 0 1; do
      timeout -k 2 900 "$STRATA" netem exec --name "$name" $r -- env STRATA_RANK=$r \
        STRATA_WORLD_SIZE=2 STRATA_ADDR=10.77.0.1:$port STRATA_SHM=0 STRATA_TIMEOUT=120 \
        STRATA_ENCRYPT=$mode "$STRATA" bench allreduce -b 16M -e 256M -f 4 -n 3 -w 1 \
        -J "$json.$r" >"$out/$1-$2-$3.$r.log" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    mv "$json.0" "$json" 2>/dev/null || true
    return $rc
  fi
}

wheres=(loopback)
if [ "${ENC_SKIP_WAN:-0}" != 1 ] && [ "$(id -u)" -eq 0 ] && [ -c /dev/net/tun ]; then
  "$STRATA" netem up --name "$name" --sites 2 --lifetime 3600 --link "0-1:rate=1gbit,delay=25ms" \
    >"$out/netem.log" 2>&1 && wheres+=(wan) || echo "netem up failed: WAN rows skipped" >&2
fi
for round in $(seq "$REPEAT"); do
  for where in "${wheres[@]}"; do
    for mode in off on; do
      echo "[$(date -u +%H:%M:%S)] round $round: $where, STRATA_ENCRYPT=$mode" >&2
      one_run "$where" "$mode" "$round" || echo "  failed: see $out/$where-$mode-$round*.log" >&2
    done
  done
done
"$STRATA" bench --cipher >"$out/cipher.txt" 2>&1 || true
"$PY" - "$out" "${wheres[@]}" <<'PY'
import glob, json, os, statistics, sys
out, wheres = sys.argv[1], sys.argv[2:]
def times(where, mode):
    per = {}
    for f in glob.glob(os.path.join(out, f"{where}-{mode}-*.json")):
        for r in json.load(open(f))["results"]:
            best = min(x["time"] for x in (r["out_of_place"], r["in_place"]) if x and not x["nwrong"])
            per.setdefault(r["size"], []).append(best / 1e6)
    return {s: statistics.median(v) for s, v in per.items()}
print("2-rank float allreduce, median of rounds, best of out-of-place and in-place (seconds)")
print(f"{'where':10} {'size':>9} {'clear s':>9} {'sealed s':>9} {'sealed/clear':>13}")
for w in wheres:
    clear, sealed = times(w, "off"), times(w, "on")
    for size in sorted(clear):
        if size in sealed:
            print(f"{w:10} {size >> 20:>6} MiB {clear[size]:9.3f} {sealed[size]:9.3f} "
                  f"{100 * clear[size] / sealed[size]:12.1f}%")
print(open(os.path.join(out, "cipher.txt")).read().rstrip())
print("raw runs:", out)
PY
