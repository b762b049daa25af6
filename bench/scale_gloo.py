#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""scale_gloo.py — one rank of bench/scale.sh for Gloo: torch.distributed's
init_process_group("gloo") and a first 4-byte all_reduce, measured as bench/scale_rank.c measures
strata and MPI, and written in its line format to OUT_DIR/<rank>.txt:

  rank nranks start_epoch_s init_end_epoch_s init_s allreduce_s fds rss_kb hwm_kb pss_kb
  store_requests store_bytes import_s parent_rss_kb parent_hwm_kb

(store figures -1: torch's TCPStore is not counted; import_s is `import torch`, which the C
programs do not pay). Ranks meet through env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, which
`strata launch` sets as torchrun does).

usage: strata launch -n N -- python scale_gloo.py OUT_DIR
"""
import datetime
import os
import sys
import time

start_epoch_s = time.time()
t_import = time.monotonic()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import_s = time.monotonic() - t_import


def read_kb(path, field):
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def main():
    if len(sys.argv) != 2:
        print("usage: scale_gloo.py OUT_DIR", file=sys.stderr)
        return 2
    out_dir = sys.argv[1]
    t0 = time.monotonic()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=900))
    t1 = time.monotonic()
    init_end_epoch_s = time.time()
    rank, nranks = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    t2 = time.monotonic()
    if float(t[0]) != nranks * (nranks + 1) / 2:
        print(f"scale_gloo: rank {rank}: all_reduce gave {float(t[0])}", file=sys.stderr)
        return 1
    fds = len(os.listdir("/proc/self/fd")) - 1
    rss = read_kb("/proc/self/status", "VmRSS:")
    hwm = read_kb("/proc/self/status", "VmHWM:")
    pss = read_kb("/proc/self/smaps_rollup", "Pss:")
    parent = f"/proc/{os.getppid()}/status"
    prss, phwm = (read_kb(parent, "VmRSS:"), read_kb(parent, "VmHWM:")) if rank == 0 else (-1, -1)
    with open(os.path.join(out_dir, f"{rank}.txt"), "w") as f:
        f.write(f"{rank} {nranks} {start_epoch_s:.6f} {init_end_epoch_s:.6f} {t1 - t0:.6f} "
                f"{t2 - t1:.6f} {fds} {rss} {hwm} {pss} -1 -1 {import_s:.6f}\n")
    dist.all_reduce(t)  # everyone has counted before anyone closes
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
