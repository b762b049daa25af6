# SPDX-License-Identifier: Apache-2.0
"""torch.distributed all_reduce, a DDP step and an FSDP2 step on the "strata" backend against
"gloo".

Run as the ranks of one job:  strata launch -n N -- python bench/torch_allreduce.py (with the
venv's python: scripts/venv.sh; under torchrun as well). The default group is "strata", a gloo
group over the same ranks sits beside it, and each measurement alternates between the two
(strata, gloo, strata, gloo, ...), keeping each backend's fastest round: the same machine load
for both, the same rule for both.

all_reduce: f32 sum in place, sizes -b .. -e by -f; a size's time is the mean of its iterations
on the slowest rank (as nccl-tests and `strata bench` time), checked once for the right sum.
--report JSON prints a saved run (-J) again and ends with the targets as PASS/FAIL. What the
backend adds to the C library is measured by pairs: --pair TORCH C names a run of this script
with --strata-only --iters 20 and a `strata bench allreduce -a 3 -J` run beside it (the same
strata_allreduce call in place on a malloc'd buffer, from C), over the same sizes at the same
rank count, repeated, the pairs interleaved in time. A size's figure is the median over pairs of
torch-on-strata's time over the C loop's: on a shared machine single runs of either differ by
20% or more, and a ratio of neighbours in time is what stays put.
Training steps: zero_grad, forward, backward, SGD of a --layers x Linear(4096, 4096) model (3
layers: 50.3M parameters, 201 MB of gradients) on a batch of --batch (8), under DDP and under
FSDP2 (fully_shard per layer over a 1-D mesh of each backend); --pairs (5) interleaved pairs, the
order swapped each pair; the median time of each backend and the median of the pairs' ratios.
Rank 0 prints the tables; -J FILE writes them as JSON.
"""
import argparse
import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    text = text.strip().upper().rstrip("B")
    if text and text[-1] in units:
        return int(float(text[:-1]) * units[text[-1]])
    return int(text)


def size_text(nbytes):
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return "%g %s" % (nbytes / scale, unit)
    return "%d B" % nbytes


def slowest(seconds, gloo):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return float(t[0])


def iterations(nbytes, scale):
    if nbytes <= 64 << 10:
        n = 200
    elif nbytes <= 1 << 20:
        n = 50
    elif nbytes <= 16 << 20:
        n = 10
    else:
        n = 4
    return max(1, int(n * scale))


def time_allreduce(buf, group, iters, gloo):
    dist.all_reduce(buf, group=group)  # warm: connections, pages, caches
    dist.barrier(group=gloo)
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf, group=group)
    return slowest((time.perf_counter() - start) / iters, gloo)


def mirror_c_bench(view, iters, nranks):
    """Gives `view` the history of the C bench's in-place buffer: written at allocation, then by
    the out-of-place collective (warm-up and iterations) that bench times before in place. The
    history matters: on a virtual machine, the same C loop over the same library runs 10-25%
    slower on pages first written by memset than on pages the collective wrote last, so
    comparing a fresh tensor with the C bench's reused buffer would count that against the
    backend."""
    if view.numel() % nranks:
        return
    part = torch.ones(view.numel() // nranks, dtype=view.dtype)
    gather = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    for _ in range(iters + 1):
        gather(view, part)
    view.zero_()


def check_allreduce(buf, group, rank, nranks):
    buf.fill_(rank + 1)
    dist.all_reduce(buf, group=group)
    return bool((buf == nranks * (nranks + 1) // 2).all())


def load_c_bench(path):
    """size -> the in-place time (us) of one `strata bench -J` report."""
    times = {}
    with open(path) as f:
        report = json.load(f)
    for row in report.get("results", []):
        fig = row["in_place"]  # nccl-tests' keys (size, time in us); older runs' spelling too
        size = int(row["size"] if "size" in row else row["size_bytes"])
        times[size] = float(fig["time"] if "time" in fig else fig["time_us"])
    return times


def pair_ratios(pairs):
    """size -> the torch/C time ratios of every (torch run, C bench run) pair that has it."""
    ratios = {}
    for torch_path, c_path in pairs or []:
        if not (os.path.exists(torch_path) and os.path.exists(c_path)):
            continue
        with open(torch_path) as f:
            rows = json.load(f)["allreduce"]
        c_us = load_c_bench(c_path)
        for row in rows:
            if row["size_bytes"] in c_us:
                ratios.setdefault(row["size_bytes"], []).append(
                    row["strata_us"] / c_us[row["size_bytes"]])
    return ratios


def model_of(layers):
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(4096, 4096) for _ in range(layers)])


def training_models(kind, layers, gloo, nranks):
    """The same model twice, trained data-parallel over strata and over gloo: DDP, or FSDP2
    (fully_shard per layer) over a 1-D mesh of each backend."""
    import copy
    base = model_of(layers)
    if kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return {"strata": DDP(copy.deepcopy(base)),
                "gloo": DDP(copy.deepcopy(base), process_group=gloo)}
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    models = {}
    for name in ("strata", "gloo"):
        mesh = init_device_mesh("cpu", (nranks,), backend_override={0: name})
        model = copy.deepcopy(base)
        for layer in model:
            fully_shard(layer, mesh=mesh)
        models[name] = fully_shard(model, mesh=mesh)
    return models


def step_pairs(kind, layers, batch, pairs, gloo, rank, nranks):
    """One training step (zero_grad, forward, backward, SGD) on each backend, `pairs` times,
    the two interleaved and their order swapped each pair; the medians of each backend's times
    on the slowest rank and of the pairs' gloo/strata ratios."""
    models = training_models(kind, layers, gloo, nranks)
    params = sum(p.numel() for p in model_of(layers).parameters())
    optimizers = {k: torch.optim.SGD(m.parameters(), lr=1e-6) for k, m in models.items()}
    x = torch.randn(batch, 4096, generator=torch.Generator().manual_seed(rank))

    def step(name):
        optimizers[name].zero_grad(set_to_none=False)
        models[name](x).square().mean().backward()
        optimizers[name].step()

    for name in models:
        step(name)  # warm: buckets, connections, shards
    times = {name: [] for name in models}
    for k in range(pairs):
        for name in (("strata", "gloo") if k % 2 == 0 else ("gloo", "strata")):
            dist.barrier(group=gloo)
            start = time.perf_counter()
            step(name)
            times[name].append(slowest(time.perf_counter() - start, gloo))
    ratios = [g / s for s, g in zip(times["strata"], times["gloo"])]
    return {"kind": kind, "parameters": params, "layers": layers, "batch": batch, "pairs": pairs,
            "strata_step_s": statistics.median(times["strata"]),
            "gloo_step_s": statistics.median(times["gloo"]),
            "gloo_over_strata": statistics.median(ratios),
            "ratio_min": min(ratios), "ratio_max": max(ratios)}


HEADER = "#       size   iters   strata_us     gloo_us  gloo/strata  strata_GB/s  check"
HEADER_STRATA = "#       size   iters   strata_us  strata_GB/s  check"


def row_text(row):
    if row.get("gloo_us") is None:
        return "%12s  %6d  %10.1f  %11.2f  %5s" % (
            size_text(row["size_bytes"]), row["iters"], row["strata_us"],
            row["strata_algbw_gbps"], "OK" if row["correct"] else "WRONG")
    return "%12s  %6d  %10.1f  %10.1f  %10.2fx  %11.2f  %5s" % (
        size_text(row["size_bytes"]), row["iters"], row["strata_us"], row["gloo_us"],
        row["gloo_over_strata"], row["strata_algbw_gbps"], "OK" if row["correct"] else "WRONG")


def step_text(st):
    return ("# %s step, %.1fM parameters (%d x Linear(4096, 4096)), batch %d, median of %d "
            "interleaved pairs:\n#   strata %.3f s   gloo %.3f s   gloo/strata %.2fx "
            "(pairs %.2fx..%.2fx)" % (
                st["kind"].upper(), st["parameters"] / 1e6, st["layers"], st["batch"],
                st["pairs"], st["strata_step_s"], st["gloo_step_s"], st["gloo_over_strata"],
                st["ratio_min"], st["ratio_max"]))


def report(path, pairs):
    """A saved run's tables, the pairs' torch/C ratios, and the targets."""
    with open(path) as f:
        run = json.load(f)
    ratios = pair_ratios(pairs)
    rows, nranks = run["allreduce"], run["nranks"]
    print("== torch.distributed all_reduce, %d ranks: \"strata\" against \"gloo\" ==" % nranks)
    print(HEADER)
    for row in rows:
        print(row_text(row))
    if ratios:
        print("# torch-on-strata over strata's C bench (in place), %d interleaved pairs of runs:"
              % len(pairs))
        print("#       size  median    min    max")
        for size in sorted(ratios):
            r = ratios[size]
            print("%12s  %5.2fx  %5.2fx  %5.2fx" % (size_text(size), statistics.median(r),
                                                    min(r), max(r)))
    for st in run.get("steps", []):
        print(step_text(st))

    def verdict(name, good, figure):
        print("%-58s %-34s %s" % (name, figure, "PASS" if good else "FAIL"))

    print("== torch targets (%d ranks) ==" % nranks)
    big = [r for r in rows if r["size_bytes"] >= 1 << 20 and r.get("gloo_over_strata")]
    if big:
        low = min(big, key=lambda r: r["gloo_over_strata"])
        verdict("all_reduce >= 2x gloo from 1 MiB", low["gloo_over_strata"] >= 2.0,
                "min %.2fx (at %s)" % (low["gloo_over_strata"], size_text(low["size_bytes"])))
    medians = {size: statistics.median(r) for size, r in ratios.items() if size >= 16 << 20}
    if medians:
        worst = max(medians, key=medians.get)
        verdict("all_reduce within 10% of the C loop from 16 MiB", medians[worst] <= 1.10,
                "max median %.2fx its time (at %s)" % (medians[worst], size_text(worst)))
    for st in run.get("steps", []):
        verdict("%s step faster than on gloo" % st["kind"].upper(), st["gloo_over_strata"] > 1.0,
                "gloo/strata %.2fx" % st["gloo_over_strata"])
    verdict("every result checked", run["correct"], "")
    return 0 if run["correct"] else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-b", default="1K")
    ap.add_argument("-e", default="256M")
    ap.add_argument("-f", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2, help="alternations per size (default 2)")
    ap.add_argument("--iters-scale", type=float, default=1.0)
    ap.add_argument("--iters", type=int, default=0,
                    help="iterations at every size (default: by size, fewer for larger)")
    ap.add_argument("--strata-only", action="store_true",
                    help="time only the \"strata\" backend (for the pairs with the C bench)")
    ap.add_argument("--pair", nargs=2, action="append", metavar=("TORCH_JSON", "C_JSON"),
                    help="with --report: a --strata-only run and the `strata bench allreduce -J` "
                         "run beside it (repeatable)")
    ap.add_argument("--layers", type=int, default=3,
                    help="Linear(4096, 4096) layers of the DDP and FSDP2 model (3: 50.3M "
                         "parameters); 0: no training steps")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=5, help="interleaved pairs of steps")
    ap.add_argument("--steps", default="ddp,fsdp2", help="which training steps to time")
    ap.add_argument("--device", default="cpu",
                    help="where the all_reduce buffer lives (cuda: through strata's staging)")
    ap.add_argument("-J", default=None)
    ap.add_argument("--report", metavar="JSON", help="print a saved run (-J) and stop")
    args = ap.parse_args()
    if args.report:
        return report(args.report, args.pair)
    import strata.torch  # noqa: F401  (registers the backend)
    min_bytes, max_bytes = parse_size(args.b), parse_size(args.e)
    torch.set_num_threads(1)
    dist.init_process_group("strata", timeout=datetime.timedelta(seconds=300))
    rank, nranks = dist.get_rank(), dist.get_world_size()
    gloo = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=300))
    groups = {"strata": None} if args.strata_only else {"strata": None, "gloo": gloo}
    device = torch.device(args.device)
    if device.type == "cuda":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                              % torch.cuda.device_count())
    buf = torch.zeros(max_bytes // 4, dtype=torch.float32, device=device)
    if rank == 0:
        print("# torch %s all_reduce float32 sum in place, %d ranks: backend \"strata\" against "
              "\"gloo\" (best of %d alternating rounds)" % (torch.__version__, nranks, args.rounds))
        print(HEADER_STRATA if args.strata_only else HEADER, flush=True)
    rows, ok = [], True
    nbytes = min_bytes
    while nbytes <= max_bytes:
        view = buf[: nbytes // 4]
        iters = args.iters or iterations(nbytes, args.iters_scale)
        best = {k: float("inf") for k in groups}
        if args.strata_only:
            mirror_c_bench(view, iters, nranks)
        for _ in range(args.rounds):
            for name, group in groups.items():
                if not args.strata_only:
                    view.zero_()
                best[name] = min(best[name], time_allreduce(view, group, iters, gloo))
        good = all(check_allreduce(view, g, rank, nranks) for g in groups.values())
        ok = ok and good
        row = {"size_bytes": nbytes, "iters": iters, "strata_us": best["strata"] * 1e6,
               "gloo_us": None, "gloo_over_strata": None,
               "strata_algbw_gbps": nbytes / best["strata"] / 1e9, "correct": good}
        if "gloo" in best:
            row.update(gloo_us=best["gloo"] * 1e6, gloo_over_strata=best["gloo"] / best["strata"])
        rows.append(row)
        if rank == 0:
            print(row_text(row), flush=True)
        nbytes *= args.f
    del buf, view
    steps = []
    if args.layers > 0 and not args.strata_only:
        for kind in filter(None, args.steps.split(",")):
            st = step_pairs(kind, args.layers, args.batch, args.pairs, gloo, rank, nranks)
            steps.append(st)
            if rank == 0:
                print(step_text(st), flush=True)
    if rank == 0:
        loadavg = open("/proc/loadavg").read().strip()
        print("# load average at the end: %s" % loadavg, flush=True)
        if args.J:
            with open(args.J, "w") as out:
                json.dump({"tool": "torch_allreduce", "torch": torch.__version__,
                           "nranks": nranks, "allreduce": rows, "steps": steps, "correct": ok,
                           "loadavg": loadavg}, out, indent=1)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
