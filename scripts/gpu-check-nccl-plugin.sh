#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/gpu-check-nccl-plugin.sh [BUILD_DIR] — on a machine with an NVIDIA GPU, torch's NCCL
# all_reduce between 2 processes on one GPU, with NCCL_NET_PLUGIN=strata (libnccl-net-strata.so
# from BUILD_DIR, default build/) and NCCL_HOSTID set differently per process, so NCCL takes them
# for two hosts and joins them over its network: strata's plugin. It reports whether NCCL loaded
# the plugin (NCCL_DEBUG=INFO: the plugin's own "NET/strata" lines, NCCL's "Using network
# strata"), whether the sums are right, and the bus bandwidth; then the same all_reduce over
# NCCL's own sockets (NCCL_NET=Socket) as the control. scripts/gpu-check.sh calls it.
#
# Without a GPU (no nvidia-smi, or python3's torch has no CUDA or NCCL) it prints one SKIP line
# and exits 0. Exits 1 when the plugin did not load or an all_reduce failed or was wrong.
# Knobs: GPU_CHECK_BYTES (67108864), GPU_CHECK_ITERS (20), STRATA_ENCRYPT (on: frames sealed on
# loopback too, as between hosts). Logs in bench/results/gpu-check-nccl-plugin-DATE/.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-${BUILD:-$root/build}}
py=/usr/bin/python3
[ -x "$py" ] || py=python3
say() { echo "gpu-check-nccl-plugin: $*"; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "SKIP: no NVIDIA GPU here (nvidia-smi finds none)"
  exit 0
fi
if ! "$py" -c 'import sys, torch, torch.distributed as d
sys.exit(0 if torch.cuda.is_available() and d.is_nccl_available() else 1)' 2>/dev/null; then
  say "SKIP: $py's torch has no CUDA or no NCCL"
  exit 0
fi
plugin=$build/libnccl-net-strata.so
[ -e "$plugin" ] || { say "FAIL: $plugin is missing (make)"; exit 1; }
plugin_dir=$(cd "$(dirname "$plugin")" && pwd)
out=$root/bench/results/gpu-check-nccl-plugin-$(date -u +%Y%m%d-%H%M%S)
mkdir -p "$out"
say "$(nvidia-smi -L | head -n 1); torch $("$py" -c 'import torch; print(torch.__version__, "NCCL", ".".join(map(str, torch.cuda.nccl.version())))')"

# run LABEL ENV...: both ranks on cuda:0, each its own NCCL_HOSTID; 0 when both exit 0
run() {
  local label=$1 port=$((20000 + RANDOM % 20000)) rc=0 pids=()
  shift
  for r in 0 1; do
    env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      NCCL_HOSTID="strata-gpu-check-host$r" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
      NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 "$@" \
      timeout -k 5 300 "$py" "$root/scripts/gpu_check_nccl_plugin.py" >"$out/$label.$r.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  return $rc
}
# field LABEL KEY: from rank 0's JSON line
field() {
  "$py" -c 'import json, sys
for line in open(sys.argv[1]):
    if line.startswith("{"):
        print(json.loads(line)[sys.argv[2]]); break' "$out/$1.0.log" "$2" 2>/dev/null
}

fails=0
secret=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
run plugin NCCL_NET_PLUGIN=strata NCCL_NET=strata LD_LIBRARY_PATH="$plugin_dir:${LD_LIBRARY_PATH:-}" \
  STRATA_HOST=127.0.0.1 STRATA_JOB_ID=gpu-check STRATA_SECRET="$secret" \
  STRATA_ENCRYPT="${STRATA_ENCRYPT:-on}"
plugin_rc=$?
loaded=no
grep -q "NET/strata: device" "$out/plugin.0.log" "$out/plugin.1.log" 2>/dev/null && loaded=yes
chosen=no
grep -q "Using network strata" "$out/plugin.0.log" 2>/dev/null && chosen=yes
say "plugin loaded by NCCL: $loaded (its init line in the NCCL_DEBUG=INFO log); NCCL's network: $(grep -o -m1 'Using network [A-Za-z_-]*' "$out/plugin.0.log" 2>/dev/null | sed 's/Using network //' || echo '?')"
if [ $plugin_rc -eq 0 ] && [ "$loaded" = yes ] && [ "$chosen" = yes ] && [ "$(field plugin correct)" = True ]; then
  say "all_reduce $(field plugin bytes) bytes over strata's plugin: busbw $(printf '%.3f' "$(field plugin busbw_gbps)") GB/s, sums correct"
else
  say "FAIL: the all_reduce over strata's plugin (exit $plugin_rc, loaded $loaded, chosen $chosen); last lines:"
  tail -n 15 "$out/plugin.0.log"
  fails=$((fails + 1))
fi
if run socket NCCL_NET=Socket NCCL_SOCKET_IFNAME=lo && [ "$(field socket correct)" = True ]; then
  say "control: the same all_reduce over NCCL's sockets: busbw $(printf '%.3f' "$(field socket busbw_gbps)") GB/s"
else
  say "control over NCCL's sockets failed (not the plugin's fault); see $out/socket.0.log"
fi
say "logs in $out"
exit $((fails > 0))
