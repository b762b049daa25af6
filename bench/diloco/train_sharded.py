#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of the sharded DiLoCo demonstration (bench/diloco/run_sharded.sh starts them).

Sites of several ranks each, FSDP2 inside a site, train.py's byte-level transformer and corpus:

  --mode sync    synchronous HSDP: one process group over every site's ranks, the model sharded
                 inside a site and replicated across sites (fully_shard over the 2-D mesh), so
                 every step's gradients cross the WAN;
  --mode diloco  every site its own process group (FSDP2 inside it); across sites
                 strata.torch.DiLoCo over one strata communicator per shard index (store=,
                 site=, sites=): a site whose ranks die is dropped, one started with --join is
                 admitted at the end of an outer step and takes the state from a live site.

Every rank reads the same store (--store host:port, a torch TCPStore: `--serve-store` runs one).
Batches depend on the seed, the site, the rank in the site and the step only, so the runs of a
comparison see the same tokens, and a restarted site continues with the batches of the steps it
rejoins at. The site's rank 0 writes the site's JSON (the fields bench/diloco/report.py reads;
wan_bytes_sent summed over the site's ranks).
"""
import argparse
import datetime
import json
import os
import signal
import sys
import time

import warnings

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

# ByteLM's logits are a view (its head's output); loss_of only reads them, out of place, so
# FSDP2's caution about in-place ops on such a view does not apply
warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
# a site that joins mid-run moves its learning-rate schedule to the step it joins at before its
# first optimizer step, on purpose
warnings.filterwarnings("ignore", message="Detected call of `lr_scheduler.step\\(\\)` before")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train import ByteLM, corpus, evaluate, loss_of, lr_factor, netem_bytes, windows  # noqa: E402


def serve_store(addr):
    host, port = addr.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(hours=2))
    print(f"store on {addr}", flush=True)
    while True:  # until the run script stops it
        time.sleep(3600)
        store.add("alive", 1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--serve-store", default=None, help="host:port: serve the store, nothing else")
    ap.add_argument("--mode", choices=["sync", "diloco"])
    ap.add_argument("--name", default=None)
    ap.add_argument("--store", help="host:port of the store")
    ap.add_argument("--job", default="sharded")
    ap.add_argument("--site", type=int, default=0)
    ap.add_argument("--sites", type=int, default=2)
    ap.add_argument("--local", type=int, default=0, help="this rank's index in its site")
    ap.add_argument("--ranks-per-site", type=int, default=2)
    ap.add_argument("--join", action="store_true", help="a site started again mid-run")
    ap.add_argument("--die-at", type=int, default=0, help="SIGKILL this rank after that step")
    ap.add_argument("--incarnation", type=int, default=0)
    ap.add_argument("--sync-every", type=int, default=50)
    ap.add_argument("--fragments", type=int, default=1)
    ap.add_argument("--delay", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--outer-momentum", type=float, default=0.6)
    ap.add_argument("--compress", default="none")
    ap.add_argument("--timeout", type=float, default=30.0, help="shard communicators' timeout")
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--lr-floor", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-seqs", type=int, default=64)
    ap.add_argument("--final-eval-seqs", type=int, default=512)
    ap.add_argument("--shard-chunk", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--corpus", default="/usr/lib/python3.11/*.py")
    ap.add_argument("--netem", default=None)
    ap.add_argument("--strata", default="strata")
    ap.add_argument("--out", default=None, help="the site's JSON (SITE is replaced)")
    a = ap.parse_args()
    if a.serve_store:
        serve_store(a.serve_store)
        return
    import strata
    import strata.torch

    torch.set_num_threads(1)
    host, port = a.store.rsplit(":", 1)
    store = dist.TCPStore(host, int(port), is_master=False, timeout=datetime.timedelta(hours=1))
    R, S = a.ranks_per_site, a.sites
    grank = a.site * R + a.local
    run = f"{a.job}/{a.name or a.mode}"
    if a.mode == "sync":  # one group over every rank: HSDP
        dist.init_process_group("strata", store=dist.PrefixStore(f"{run}/all", store),
                                rank=grank, world_size=S * R)
        mesh2 = init_device_mesh("cpu", (S, R), mesh_dim_names=("site", "shard"))
        mesh, site_group = mesh2, mesh2["shard"].get_group()
    else:  # one group per site (incarnation: a restarted site forms a new one)
        dist.init_process_group(
            "strata", store=dist.PrefixStore(f"{run}/site{a.site}/{a.incarnation}", store),
            rank=a.local, world_size=R)
        mesh = init_device_mesh("cpu", (R,), mesh_dim_names=("shard",))
        site_group = None

    train, held, nfiles = corpus(a.corpus)
    chunk = a.shard_chunk
    data = b"".join(train[i:i + chunk] for i in range(grank * chunk, len(train), S * R * chunk))
    ev = torch.Generator().manual_seed(a.seed)

    def eval_set(n):
        starts = torch.randint(0, len(held) - a.ctx - 1, (n,), generator=ev)
        return [windows(held, starts[i:i + 16], a.ctx) for i in range(0, n, 16)]

    final_eval = eval_set(a.final_eval_seqs)
    ckpt_eval = final_eval[:max(1, a.eval_seqs // 16)]
    torch.manual_seed(a.seed)
    model = ByteLM(a.d_model, a.layers, a.heads, a.ctx)
    nparams = sum(p.numel() for p in model.parameters())
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    inner = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                              weight_decay=a.weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(
        inner, lambda s: lr_factor(s, a.warmup, a.steps, a.lr_floor))
    opt = inner
    diloco = None
    if a.mode == "diloco":
        diloco = strata.torch.DiLoCo(
            model, inner, sync_every=a.sync_every, outer_lr=a.outer_lr,
            outer_momentum=a.outer_momentum, fragments=a.fragments, delay=a.delay,
            alpha=a.alpha, compress=a.compress, store=store, site=a.site, sites=S,
            job=f"{run}/outer", timeout=a.timeout, join=a.join)
        opt = diloco
        for _ in range(diloco.inner_steps):  # a joiner continues the schedule where it joins
            sched.step()

    def wan_bytes():
        comm = diloco.comm if diloco is not None else None
        return comm.stats().get("wan_bytes_sent", 0) if comm is not None else 0

    comm_seen = diloco.comm if diloco is not None else None
    wan_total = 0
    wan_before = wan_bytes()  # counts the start's broadcast of theta already
    first = (diloco.inner_steps if diloco is not None else 0) + 1
    ip0 = netem_bytes(a.strata, a.netem) if a.local == 0 else None
    # sync: what this rank's strata process groups sent to the other site
    torch_wan0 = strata.torch.stats()["wan_bytes_sent"] if a.mode == "sync" else 0
    evals, train_loss, step_s, exchange_s, wan_step = [], [], [], [], []
    elapsed, t0 = 0.0, time.perf_counter()
    tokens_per_step = a.batch * a.ctx * S * R
    for step in range(first, a.steps + 1):
        gen = torch.Generator().manual_seed((a.seed * 1000 + grank) * 100003 + step)
        starts = torch.randint(0, len(data) - a.ctx - 1, (a.batch,), generator=gen)
        loss = loss_of(model, windows(data, starts, a.ctx))
        opt.zero_grad()
        loss.backward()
        if diloco is not None and diloco.comm is not comm_seen:  # shrunk or grown: new counters
            wan_total += wan_before
            comm_seen, wan_before = diloco.comm, 0
        comm_at, wan_prev = (diloco.comm, wan_before) if diloco is not None else (None, 0)
        t_step = time.perf_counter()
        opt.step()
        step_s.append(time.perf_counter() - t_step)
        exchange_s.append(diloco.exchange_seconds if diloco is not None else 0.0)
        sched.step()
        if diloco is not None:
            wan_before = wan_bytes()
            # this step's WAN bytes; unknown (-1) where a shrink or a grow replaced the counters
            wan_step.append(wan_before - wan_prev if diloco.comm is comm_at else -1)
        train_loss.append(loss.item())
        if a.die_at and step == a.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        if step % a.eval_every == 0 or step == a.steps:
            elapsed += time.perf_counter() - t0
            evals.append({"step": step, "tokens": step * tokens_per_step, "time_s": elapsed,
                          "loss": evaluate(model, ckpt_eval)})
            if a.local == 0:
                print(f"[{a.name or a.mode} site {a.site}] step {step}/{a.steps} train "
                      f"{loss.item():.3f} eval {evals[-1]['loss']:.3f} {elapsed:.1f}s", flush=True)
            t0 = time.perf_counter()
    wall = elapsed + time.perf_counter() - t0
    ip1 = netem_bytes(a.strata, a.netem) if a.local == 0 else None
    final = evaluate(model, final_eval)
    # the site's WAN bytes: its ranks' shard communicators (diloco) or the emulator's (sync,
    # whose cross-site traffic runs in torch's process group)
    if a.mode == "sync":
        wan_total, wan_before = strata.torch.stats()["wan_bytes_sent"] - torch_wan0, 0
    mine = torch.tensor([wan_total + wan_before], dtype=torch.float64)
    dist.all_reduce(mine, group=site_group)
    # each step's optimizer step and outer exchanges as the site's slowest rank took them
    slowest = torch.tensor([step_s, exchange_s], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=site_group)
    # each step's WAN bytes of the site's ranks together (-1: unknown on some rank)
    site_step = torch.tensor(wan_step or [0] * len(step_s), dtype=torch.float64)
    unknown = (site_step < 0).to(torch.float64)
    dist.all_reduce(site_step, group=site_group)
    dist.all_reduce(unknown, group=site_group)
    site_step[unknown > 0] = -1
    ip = {k: ip1[k] - ip0.get(k, 0) for k in ip1} if ip0 is not None and ip1 else None
    out = {
        "name": a.name or a.mode, "rank": a.site, "world": S, "site": f"site{a.site}",
        "config": {**{k: v for k, v in vars(a).items() if k not in ("out", "serve_store")},
                   "mode": a.mode, "ranks_per_site": R},
        "params": nparams, "corpus_files": nfiles, "corpus_sha256_16": "",
        "tokens": a.steps * tokens_per_step, "wall_s": wall,
        "wan_bytes_sent": int(mine[0]),
        "wan_bytes_source": "wan_bytes_sent of the shard communicators" if a.mode == "diloco"
        else "wan_bytes_sent of the process groups (strata.torch.stats)",
        "sync_warmup_steps": 0, "wan_bytes_sent_after_sync_warmup": None,
        "netem_ip_bytes": ip,
        "first_step": first, "opt_step_s": slowest[0].tolist(),
        "exchange_s": slowest[1].tolist(),
        "wan_bytes_per_step": [int(b) for b in site_step.tolist()], "final_eval_loss": final, "evals": evals, "train_loss": train_loss,
        "outer_steps": diloco.outer_steps if diloco is not None else 0,
    }
    if a.local == 0 and a.out:
        with open(a.out.replace("SITE", str(a.site)), "w") as f:
            json.dump(out, f)
        print(f"[{out['name']} site {a.site}] final eval {final:.4f} wan bytes "
              f"{out['wan_bytes_sent']} wall {wall:.1f}s", flush=True)
    if diloco is not None:
        diloco.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
