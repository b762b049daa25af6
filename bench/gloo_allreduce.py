#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""gloo_allreduce.py — Gloo's allreduce (torch.distributed, backend "gloo") measured the way
`strata bench` measures strata, so bench/run.sh can put them side by side.

Method (strata bench's, itself nccl-tests'): for each size, fill, one untimed call, barrier, N
timed calls, per-rank mean, max over ranks, busbw = size/time x 2(n-1)/n; then a check (each rank
fills rank+1+index%7, one call, count elements that differ from the expected sum). Gloo reduces
in place (the tensor is both input and output), so only the in-place figures exist; the JSON
has the keys `strata bench -J` writes, with "out_of_place": null.

Ranks join through torch's env:// rendezvous: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (what
torchrun sets; bench/run.sh sets them itself). GLOO_SOCKET_IFNAME picks the interface.

usage: gloo_allreduce.py [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-J FILE]
Run it with Debian's /usr/bin/python3 (the one with torch).
"""
import argparse
import datetime
import json
import sys
import time

import torch
import torch.distributed as dist


def parse_size(text):
    units = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
    text = text.strip()
    if text and text[-1].upper() in units:
        return int(float(text[:-1]) * units[text[-1].upper()])
    return int(float(text))


def measure(buf, count, iters, rank, nranks):
    """Timed loop then check, as strata bench's bench_time (in place)."""
    t = buf[:count]
    t.copy_(fill(count, rank))
    dist.all_reduce(t)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    seconds = (time.perf_counter() - start) / iters
    sec = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(sec, op=dist.ReduceOp.MAX)
    seconds = float(sec[0])
    nbytes = count * 4
    algbw = nbytes / 1e9 / seconds if seconds > 0 else 0.0
    busbw = algbw * 2.0 * (nranks - 1) / nranks
    t.copy_(fill(count, rank))
    dist.all_reduce(t)
    want = fill(count, 0) * nranks + (nranks * (nranks + 1) // 2 - nranks)
    wrong = torch.tensor([int((t != want).sum())], dtype=torch.int64)
    dist.all_reduce(wrong)
    return {"time_us": seconds * 1e6, "algbw_gbps": algbw, "busbw_gbps": busbw,
            "wrong": int(wrong[0])}


_fill_cache = {}


def fill(count, rank):
    """rank+1+index%7 as float32 (exact)."""
    key = count
    if key not in _fill_cache:
        _fill_cache.clear()
        _fill_cache[key] = (torch.arange(count, dtype=torch.int64) % 7).to(torch.float32)
    return _fill_cache[key] + float(rank + 1)


def time_text(us):
    if us >= 10000.0:
        return "%7.0f" % us
    if us >= 100.0:
        return "%7.1f" % us
    return "%7.2f" % us


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="32M")
    ap.add_argument("-f", type=int, default=2)
    ap.add_argument("-n", type=int, default=20)
    ap.add_argument("-w", type=int, default=5)
    ap.add_argument("-J", default=None)
    args = ap.parse_args()
    try:
        min_bytes, max_bytes = parse_size(args.b), parse_size(args.e)
    except ValueError:
        ap.error("-b/-e: not a size")
    if args.f < 2 or args.n < 1 or args.w < 0 or min_bytes < 4 or min_bytes > max_bytes:
        ap.error("want -b >= 4, -b <= -e, -f >= 2, -n >= 1, -w >= 0")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://",
                            timeout=datetime.timedelta(seconds=120))
    rank, nranks = dist.get_rank(), dist.get_world_size()
    buf = torch.zeros(max_bytes // 4, dtype=torch.float32)
    for _ in range(args.w):
        dist.all_reduce(buf)
        dist.all_reduce(buf[: min_bytes // 4])
    if rank == 0:
        print("# gloo_allreduce: torch %s gloo allreduce float sum (in place), %d ranks, "
              "iters %d warmup %d" % (torch.__version__, nranks, args.n, args.w))
        print("#       size         count      type   redop    root     time   algbw   busbw #wrong")
    results, errors, bw = [], 0, []
    size = min_bytes
    while size <= max_bytes:
        count = size // 4
        fig = measure(buf, count, args.n, rank, nranks)
        errors += fig["wrong"] > 0
        bw.append(fig["busbw_gbps"])
        results.append({"size_bytes": count * 4, "count": count, "type": "float", "redop": "sum",
                        "root": -1, "out_of_place": None, "in_place": fig})
        if rank == 0:
            print("%12d  %12d  %8s  %6s  %6d  %7s  %6.2f  %6.2f  %5d" % (
                count * 4, count, "float", "sum", -1, time_text(fig["time_us"]),
                fig["algbw_gbps"], fig["busbw_gbps"], fig["wrong"]), flush=True)
        size *= args.f
    avg = sum(bw) / len(bw) if bw else 0.0
    if rank == 0:
        print("# Out of bounds values : %d %s" % (errors, "FAILED" if errors else "OK"))
        print("# Avg bus bandwidth    : %g \n#" % avg, flush=True)
        if args.J:
            with open(args.J, "w") as out:
                json.dump({"tool": "gloo_allreduce", "torch": torch.__version__,
                           "collective": "allreduce", "nranks": nranks, "iters": args.n,
                           "warmup_iters": args.w, "results": results,
                           "out_of_bounds": errors, "avg_busbw_gbps": avg}, out, indent=1)
    dist.barrier()
    dist.destroy_process_group()
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
