#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# bench/wan_compress.sh [BUILD_DIR] — issue 4, point 4 on an emulated WAN: a float allreduce
# between two sites joined by one link (default 1 Gb/s, 25 ms each way), once per wire encoding
# (none, bf16, int8, fp8, int4; docs/compression.md), measured against the model's prediction.
# Root only (network namespaces, TUN); a few minutes; `netem down` runs on any exit.
#
# The prediction. A 2-rank ring allreduce of N bytes sends N bytes per rank over its one
# outgoing direction (N/2 reduce-scatter + N/2 allgather), so uncompressed t = N/R + 2·RTT/2·k
# (k sequential message rounds; a handful); compressed, the bytes on the wire shrink by the
# encoding's ratio r = wire/data (0.5 bf16, 0.258 int8, 0.254 fp8, 0.133 int4), so t ≈ r·N/R. The
# script predicts t_pred = r·N/R + RTT (one round trip of start-up per phase pair) and prints the
# measured time beside it, the bytes saved as strata counted them (the "# Compression" line of
# strata bench), and the speed-up over the uncompressed run. #wrong = 0 means every element was
# within the encoding's error bound (strata bench checks compressed results against it).
#
# Knobs: CMP_RATE (1gbit), CMP_DELAY (25ms one way), CMP_SIZE (256M), CMP_ITERS (2),
# CMP_CODECS ("none bf16 int8 fp8 int4"), CMP_STREAMS (8). Output: a table on stdout; logs and JSON
# in bench/results/wan-compress-DATE/ (gitignored).
set -u
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build}
STRATA=$(cd "$build" 2>/dev/null && pwd)/strata
[ -x "$STRATA" ] || { echo "wan_compress.sh: $build/strata is missing (build first)" >&2; exit 1; }
if [ "$(id -u)" -ne 0 ] || [ ! -c /dev/net/tun ]; then
  echo "wan_compress.sh: needs root and /dev/net/tun (network namespaces + TUN)" >&2; exit 1
fi
PY=${STRATA_PYTHON:-/usr/bin/python3}
rate=${CMP_RATE:-1gbit}
delay=${CMP_DELAY:-25ms}
size=${CMP_SIZE:-256M}
iters=${CMP_ITERS:-2}
codecs=${CMP_CODECS:-none bf16 int8 fp8 int4}
streams=${CMP_STREAMS:-8}
name=wcmp$$
out=$here/results/wan-compress-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
addr0=10.77.0.1
cleanup() { "$STRATA" netem down --name "$name" >/dev/null 2>&1; }
trap cleanup EXIT INT TERM
note() { echo "# $*" >&2; }

note "link: rate=$rate delay=$delay each way; allreduce $size float; results in $out"
"$STRATA" netem up --name "$name" --sites 2 --lifetime 1800 --tcp-mem-max 64m \
  --link "0-1:rate=$rate,delay=$delay" >"$out/netem_up.log" 2>&1 ||
  { cat "$out/netem_up.log" >&2; echo "wan_compress.sh: netem up failed" >&2; exit 1; }
port=$((21000 + RANDOM % 20000))

run_codec() { # CODEC
  local c=$1 status=0 rp=()
  port=$((port + 1))
  for r in 0 1; do
    timeout -k 2 300 "$STRATA" netem exec --name "$name" "$r" -- env STRATA_RANK=$r \
      STRATA_WORLD_SIZE=2 STRATA_ADDR=$addr0:$port STRATA_SHM=0 STRATA_TIMEOUT=120 \
      STRATA_TCP_STREAMS=$streams "$STRATA" bench allreduce -b "$size" -e "$size" -n "$iters" -w 1 \
      --compress "$c" -J "$out/$c.r$r.json" >"$out/$c.r$r.log" 2>&1 &
    rp+=($!)
  done
  for pid in "${rp[@]}"; do wait "$pid" || status=1; done
  return $status
}

for c in $codecs; do
  note "strata --compress $c"
  run_codec "$c" || note "$c failed (see $out/$c.r*.log)"
done

"$PY" - "$out" "$size" "$rate" "$delay" $codecs <<'PY' | tee "$out/table.txt"
import json, os, re, sys
out, size_text, rate_text, delay_text = sys.argv[1:5]
codecs = sys.argv[5:]
units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
n = int(float(size_text[:-1]) * units[size_text[-1].upper()]) if size_text[-1].upper() in units else int(size_text)
m = re.fullmatch(r"([\d.]+)([kmg]?)bit", rate_text)
rate_Bps = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8
d = re.fullmatch(r"([\d.]+)(ms|us|s)", delay_text)
rtt = 2 * float(d.group(1)) * {"ms": 1e-3, "us": 1e-6, "s": 1}[d.group(2)]
# wire/data of each encoding (src/core/compress.c: blocks of 256 values, 8 or 4 header bytes)
ratio = {"none": 1.0, "bf16": 0.5, "f16": 0.5, "int8": (256 + 8) / 1024, "fp8": (256 + 4) / 1024,
         "int4": (128 + 8) / 1024}
print("# 2 sites, %s each way (RTT %.0f ms), %s; allreduce of %d bytes, 2 ranks, ring; "
      "predicted t = ratio * N / R + RTT" % (delay_text, rtt * 1e3, rate_text, n))
print("%-6s %8s %10s %10s %9s %12s %7s" % ("wire", "ratio", "measured_s", "predicted_s",
      "meas/pred", "vs_none", "#wrong"))
base = None
for c in codecs:
    try:
        j = json.load(open(os.path.join(out, c + ".r0.json")))
        r = j["results"][0]
        figs = [r[k] for k in ("out_of_place", "in_place") if r.get(k) and r[k].get("time")]
        t = min(f["time"] for f in figs) / 1e6  # nccl-tests' keys; time in us
        wrong = sum(f.get("nwrong") or 0 for f in figs)
    except (OSError, ValueError, KeyError, IndexError):
        print("%-6s failed (see %s)" % (c, out))
        continue
    log = open(os.path.join(out, c + ".r0.log")).read()
    saved = re.search(r"# Compression \w+: rank 0 sent (\d+) wire bytes for (\d+) data bytes", log)
    measured_ratio = int(saved.group(1)) / int(saved.group(2)) if saved else 1.0
    pred = ratio.get(c, measured_ratio) * n / rate_Bps + rtt
    if c == "none": base = t
    print("%-6s %8.3f %10.3f %11.3f %9.2f %12s %7d" % (c, measured_ratio, t, pred, t / pred,
          "%.2fx" % (base / t) if base else "-", wrong))
PY
