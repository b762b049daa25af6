#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/nccl-plugin/run.sh [BUILD_DIR] — NCCL's traffic pattern on strata's wire across emulated
# sites: the plugin's harness (tests/test_net_nccl_plugin.c, `bench` mode) runs a 2-rank ring of
# 256 MiB transfers, one rank per site, over `strata netem` (1 Gbit/s, 25 ms each way = 50 ms
# RTT), on a clean link and with 0.1% loss; beside it, in the same run and on the same emulator,
# the same ring over one plain TCP socket per peer with the kernel's defaults: a stand-in for an
# unpaced single-stream transport such as NCCL's own socket network with its defaults.
#
# The plugin runs as a user would run it across sites: frames sealed (STRATA_ENCRYPT=on), peers
# authenticated (a fresh STRATA_SECRET per run), every other STRATA_* setting at its default (4 streams, auto buffers, the window governor). The
# harness moves each 256 MiB as 4 MiB isend/irecv chunks with up to 32 requests in flight each
# way (NCCL's limit per comm), polling test as NCCL's proxy does.
#
# The bound: each rank sends N bytes over its one outgoing direction while it receives N, so
# t_min = N / R, R = 1 Gbit/s = 125 MB/s (IP bytes; TCP carries 1448 of every 1500, so 96.5% is
# any TCP program's ceiling): 256 MiB -> 2.147 s. A transfer's time is the slower rank's; the
# table shows the median over the timed transfers of the median run of NCCLP_REPEAT.
#
# Knobs (environment): NCCLP_LINKS ("clean:rate=1gbit,delay=25ms
# loss0.1:rate=1gbit,delay=25ms,loss=0.1%"), NCCLP_BYTES (268435456), NCCLP_ITERS (3),
# NCCLP_WARMUP (2), NCCLP_REPEAT (3), NCCLP_PLAIN_ITERS (1), NCCLP_PLAIN_TIMEOUT_S (300),
# NCCLP_CONTROL (1: also strata's own 2-rank allreduce of the same bytes, `strata bench`, as a
# control on the host's state: the plugin and strata's collectives share the data path),
# NCCLP_NICE (-10: every rank of every row runs at this niceness, so other work on a shared host
# slows the rows less; the emulator's forwarder has its own real-time priority).
# Needs root and /dev/net/tun. Raw JSON and logs in bench/results/nccl-plugin-DATE/.
set -u
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:-$root/build}" && pwd)
strata=$build/strata
harness=$build/tests/test_net_nccl_plugin
plugin=$build/libnccl-net-strata.so
for f in "$strata" "$harness" "$plugin"; do
  [ -e "$f" ] || { echo "nccl-plugin: $f is missing (cmake -DSTRATA_BUILD_TESTS=ON, build)" >&2; exit 1; }
done
[ "$(id -u)" -eq 0 ] && [ -c /dev/net/tun ] ||
  { echo "nccl-plugin: needs root and /dev/net/tun (strata netem)" >&2; exit 1; }
links=${NCCLP_LINKS:-"clean:rate=1gbit,delay=25ms loss0.1:rate=1gbit,delay=25ms,loss=0.1%"}
bytes=${NCCLP_BYTES:-268435456}
iters=${NCCLP_ITERS:-3} warmup=${NCCLP_WARMUP:-2} repeat=${NCCLP_REPEAT:-3}
plain_iters=${NCCLP_PLAIN_ITERS:-1} plain_timeout=${NCCLP_PLAIN_TIMEOUT_S:-300}
nice=${NCCLP_NICE:--10}
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n') # every rank authenticates
out=$root/bench/results/nccl-plugin-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
name=ncclp$$
cleanup() { "$strata" netem down --name "$name" >/dev/null 2>&1 || true; }
trap cleanup EXIT
trap 'exit 130' INT TERM
echo "nccl-plugin: results in $out; load average at start: $(cut -d' ' -f1-3 /proc/loadavg)" |
  tee "$out/load.txt"

# run LABEL TIMEOUT HARNESS-ARGS...: both ranks, one per site; "ok" or "fail" on stdout
run() {
  local label=$1 limit=$2 dir rc=0 pids=()
  shift 2
  dir=$(mktemp -d "$out/$label.XXXX")
  for r in 0 1; do
    timeout -k 5 "$limit" "$strata" netem exec --name "$name" "$r" -- nice -n "$nice" env STRATA_ENCRYPT=on \
      STRATA_SECRET="$secret" STRATA_JOB_ID="$name" STRATA_TIMEOUT=60 \
      STRATA_NCCL_PLUGIN="$plugin" "$harness" bench --rank "$r" --nranks 2 \
      --dir "$dir" --bytes "$bytes" --out "$out/$label.$r.json" "$@" >"$out/$label.$r.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  rm -rf "$dir"
  [ $rc -eq 0 ] && echo ok || echo fail
}

# the slower rank's time per transfer, median over transfers: seconds, or "" when a rank failed
run_time() {
  python3 - "$out/$1.0.json" "$out/$1.1.json" <<'PY'
import json, statistics, sys
try:
    ranks = [json.load(open(p)) for p in sys.argv[1:]]
except Exception:
    sys.exit(0)
if any(r["wrong"] for r in ranks):
    sys.exit(0)
print("%.4f" % statistics.median(max(t) for t in zip(*(r["times_s"] for r in ranks))))
PY
}

bound=$(awk -v b="$bytes" 'BEGIN { printf "%.4f", b / 125e6 }')
echo "| link | transport | median transfer | % of bound | runs | vs plain socket |" >"$out/table.md"
echo "|---|---|---|---|---|---|" >>"$out/table.md"
fails=0
for entry in $links; do
  label=${entry%%:*} spec=${entry#*:}
  cleanup
  "$strata" netem up --name "$name" --sites 2 --lifetime 3600 --link "0-1:$spec" \
    >"$out/$label.netem.log" 2>&1 || { cat "$out/$label.netem.log"; exit 1; }
  # the emulator's first deep queue costs it page faults (docs/netem.md): warm it first with a
  # few seconds of bulk traffic (64 MiB each way on the plain sockets), not timed
  bytes_saved=$bytes bytes=67108864
  [ "$(run "$label.warmup" 120 --plain --iters 1 --warmup 0)" = ok ] ||
    echo "nccl-plugin: the emulator's warm-up transfer failed" >&2
  bytes=$bytes_saved
  times=()
  for k in $(seq 1 "$repeat"); do
    st=$(run "$label.plugin.$k" 600 --iters "$iters" --warmup "$warmup")
    t=$(run_time "$label.plugin.$k")
    if [ "$st" = ok ] && [ -n "$t" ]; then times+=("$t"); else fails=$((fails + 1)); fi
    echo "nccl-plugin: $label plugin run $k: ${t:-FAILED} s"
  done
  # the control: strata's own 2-rank allreduce of the same bytes (each rank sends N over its
  # direction: the same bound), sealed, on the same emulator
  native=""
  if [ "${NCCLP_CONTROL:-1}" = 1 ]; then
    port=$((20000 + RANDOM % 20000)) cpids=()
    for r in 0 1; do
      timeout -k 5 600 "$strata" netem exec --name "$name" "$r" -- nice -n "$nice" env STRATA_RANK="$r" \
        STRATA_WORLD_SIZE=2 STRATA_ADDR="10.77.0.1:$port" STRATA_SHM=0 STRATA_ENCRYPT=on \
        STRATA_SECRET="$secret" STRATA_JOB_ID="$name-control" \
        STRATA_TIMEOUT=60 "$strata" bench allreduce -b "$bytes" -e "$bytes" -n "$iters" \
        -w "$warmup" -J "$out/$label.native.$r.json" >"$out/$label.native.$r.log" 2>&1 &
      cpids+=($!)
    done
    for pid in "${cpids[@]}"; do wait "$pid"; done
    native=$(python3 -c '
import json, sys
try:
    r = json.load(open(sys.argv[1]))["results"][0]
    print("%.4f" % (min(f["time"] for f in (r["out_of_place"], r["in_place"]) if f and not f["nwrong"]) / 1e6))
except Exception:
    pass' "$out/$label.native.0.json")
    echo "nccl-plugin: $label strata allreduce (control): ${native:-FAILED} s"
  fi
  st=$(run "$label.plain" "$plain_timeout" --plain --iters "$plain_iters" --warmup 0)
  plain=$(run_time "$label.plain")
  echo "nccl-plugin: $label plain socket: ${plain:-"> $plain_timeout"} s"
  "$strata" netem status --name "$name" >"$out/$label.netem.status" 2>&1 || true
  python3 - "$label" "$spec" "$bound" "${plain:-}" "$plain_timeout" "${native:-}" "${times[@]}" \
    >>"$out/table.md" <<'PY'
import statistics, sys
label, spec, bound, plain, plain_limit, native = sys.argv[1:7]
times = sorted(float(t) for t in sys.argv[7:])
bound = float(bound)
link = spec.replace("rate=", "").replace(",delay=", ", ").replace(",loss=", ", loss ")
if times:
    med = statistics.median(times)
    runs = ", ".join("%.2f" % t for t in times)
    ratio = ("%.2fx" % (float(plain) / med)) if plain else ("> %.0fx" % (float(plain_limit) / med))
    print("| %s | strata plugin, sealed | %.3f s | %.1f%% | %s s | %s |" %
          (link, med, 100 * bound / med, runs, ratio))
else:
    print("| %s | strata plugin, sealed | failed | | | |" % link)
if native:
    print("| | strata allreduce (control), sealed | %.3f s | %.1f%% | best of %s | |" %
          (float(native), 100 * bound / float(native), "the timed calls"))
if plain:
    print("| | plain socket | %.3f s | %.1f%% | 1 run | 1x |" % (float(plain), 100 * bound / float(plain)))
else:
    print("| | plain socket | > %s s | < %.1f%% | timed out | |" % (plain_limit, 100 * bound / float(plain_limit)))
PY
done
echo "nccl-plugin: load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/load.txt"
cat "$out/table.md"
exit $((fails > 0))
