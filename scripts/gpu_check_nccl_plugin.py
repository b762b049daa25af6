# SPDX-License-Identifier: Apache-2.0
"""One rank of scripts/gpu-check-nccl-plugin.sh: torch's NCCL all_reduce on cuda:0.

Both ranks share one GPU; the script gives each its own NCCL_HOSTID, so NCCL takes them for two
hosts and joins them over its network (strata's plugin, or NCCL's sockets for the control run)
instead of peer-to-peer or shared memory. Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
GPU_CHECK_BYTES / GPU_CHECK_ITERS / GPU_CHECK_WARMUP; rank 0 prints one JSON line:
{"bytes", "iters", "time_s", "algbw_gbps", "busbw_gbps", "correct"}. Exits 1 on a wrong result.
"""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    nbytes = int(os.environ.get("GPU_CHECK_BYTES", 64 << 20))
    iters = int(os.environ.get("GPU_CHECK_ITERS", 20))
    warmup = int(os.environ.get("GPU_CHECK_WARMUP", 5))
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=rank, world_size=world)
    count = nbytes // 4
    x = torch.full((count,), float(rank + 1), device="cuda")
    dist.all_reduce(x)
    torch.cuda.synchronize()
    expected = world * (world + 1) / 2
    correct = bool(torch.all(x == expected).item())
    y = torch.ones(count, device="cuda")
    for _ in range(warmup):
        dist.all_reduce(y)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(y)
    torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / iters
    dist.barrier()
    dist.destroy_process_group()
    algbw = nbytes / seconds / 1e9
    if rank == 0:
        print(json.dumps({"bytes": nbytes, "iters": iters, "time_s": seconds,
                          "algbw_gbps": algbw, "busbw_gbps": algbw * 2 * (world - 1) / world,
                          "correct": correct}), flush=True)
    return 0 if correct else 1


if __name__ == "__main__":
    sys.exit(main())
