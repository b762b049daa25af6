#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# scripts/gpu-check.sh — what this project can only check on a GPU, in one run on a machine with
# one NVIDIA GPU (or more) whose python3 has a CUDA build of torch >= 2.4, in under 8 minutes:
#  1. builds strata with that python3 (the torch backend against its torch);
#  2. the backend with CUDA tensors at 2 ranks on one GPU: collectives through the pinned host
#     staging, DDP against DDP on CPU tensors, DiLoCo over a CUDA model against the same on CPU,
#     strata.weights between CUDA tensors (tests/python/test_torch_gpu.py);
#  3. every op x dtype with the default device set to CUDA (test_torch_ops.py,
#     STRATA_TEST_DEVICE=cuda), which also binds the group to the GPU so split_group runs;
#  4. a 2-process all_reduce timing, strata against gloo, on CUDA tensors and on CPU tensors;
#  5. the NCCL net plugin (scripts/gpu-check-nccl-plugin.sh) when it is built.
# Without a GPU it says so and exits 0. Logs in bench/results/gpu-check-DATE/. Exit 1 when a
# step failed. PYTHON picks another interpreter; BUILD another build directory.
set -u
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
py=${PYTHON:-python3}
build=${BUILD:-build-gpu}
out=bench/results/gpu-check-$(date -u +%Y%m%d-%H%M%S)
say() { echo "gpu-check: $*"; }
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "SKIP: no NVIDIA GPU here (nvidia-smi finds none)"
  exit 0
fi
if ! "$py" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "SKIP: $py has no CUDA build of torch"
  exit 0
fi
mkdir -p "$out"
nvidia-smi -L | tee "$out/gpu.txt"
"$py" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' | tee -a "$out/gpu.txt"
failed=0
step() { # name command...: runs it, logs it, counts a failure
  local name=$1 started=$SECONDS
  shift
  if timeout 240 "$@" >"$out/$name.log" 2>&1; then
    say "$name: ok ($((SECONDS - started)) s)"
  else
    say "$name: FAILED ($((SECONDS - started)) s; $out/$name.log):"
    grep -E 'FAIL|Error|error' "$out/$name.log" | head -10
    failed=$((failed + 1))
  fi
}
step build bash -c "cmake -S . -B '$build' -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=\$(command -v '$py') \
  && cmake --build '$build' -j\$(nproc) --target strata_cli strata_python strata_kv_python strata_torch"
[ -x "$build/strata" ] || { say "the build failed: $out/build.log"; exit 1; }
export PYTHONPATH=$root/$build/python
step torch-gpu "$build/strata" launch -n 2 -- "$py" tests/python/test_torch_gpu.py
step torch-ops-cuda env STRATA_TEST_DEVICE=cuda "$build/strata" launch -n 2 -- "$py" \
  tests/python/test_torch_ops.py
for device in cuda cpu; do
  step "allreduce-$device" "$build/strata" launch -n 2 -- "$py" bench/torch_allreduce.py \
    --device "$device" -b 1M -e 64M -f 4 --rounds 1 --layers 0
  grep -hv '^\[' "$out/allreduce-$device.log" | grep -E '^#|^ ' | head -12
done
if [ -x scripts/gpu-check-nccl-plugin.sh ]; then
  step nccl-plugin scripts/gpu-check-nccl-plugin.sh "$build"
  grep -h 'gpu-check-nccl-plugin' "$out/nccl-plugin.log" | tail -5
fi
say "$failed step(s) failed; logs in $out"
[ "$failed" -eq 0 ]
