#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""One rank of the DiLoCo demonstration (bench/diloco/run.sh starts one per emulated site).

A byte-level decoder-only transformer trained on the Python standard library's own source
(/usr/lib/python3.11/*.py, shipped by Debian's libpython3.11-minimal and -stdlib, which every
python3 pulls in), data parallel over the ranks of a strata communicator:

  --mode sync    every inner step's gradient is averaged over the ranks (strata allreduce, AVG,
                 one flat f32 buffer per step), then every rank takes the same AdamW step;
  --mode diloco  strata.torch.DiLoCo: every rank takes its own AdamW steps on its own shard and
                 the library runs the outer exchange (H, fragments, delay, wire encoding).

Every run of a comparison sees the same batches in the same order on the same rank (the seed
and the rank choose them, the mode does not), so runs differ only in how they synchronise.

The rank writes one JSON file: its training losses, eval losses at checkpoints (on the model it
holds there), the wall-clock of training (evaluation excluded), strata's byte counters, and (on
rank 0) the final eval loss of the model averaged over the ranks: for sync and for DiLoCo with
delay 0 at a multiple of H that is the global model every rank already holds; for Streaming
DiLoCo, whose fragments are merged at different times, it is the workers' mean. The averaging
allreduce runs after the byte counters are read, so it is not counted as training traffic.
"""
import argparse
import glob
import hashlib
import json
import math
import os
import re
import subprocess
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

import strata


def netem_bytes(strata_bin, name):
    """{"0>1": IP bytes site 0 offered to the link towards 1, ...} from `strata netem status`."""
    if not name:
        return None
    try:
        text = subprocess.run([strata_bin, "netem", "status", "--name", name], capture_output=True,
                              text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"link (\d+>\d+) packets_in=\d+ bytes_in=(\d+)", text)}


def corpus(pattern):
    """The text as bytes, files in sorted order; every 10th file is held out for evaluation."""
    files = sorted(glob.glob(pattern))
    if not files:
        sys.exit(f"train.py: no file matches {pattern}")
    train, held = bytearray(), bytearray()
    for i, path in enumerate(files):
        with open(path, "rb") as f:
            (held if i % 10 == 5 else train).extend(f.read())
    return bytes(train), bytes(held), len(files)


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.ln1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class ByteLM(nn.Module):
    """GPT-style: learned positions, pre-norm blocks, an untied output layer over 256 bytes."""

    def __init__(self, d, layers, heads, ctx):
        super().__init__()
        self.emb = nn.Embedding(256, d)
        self.pos = nn.Parameter(torch.randn(ctx, d) * 0.02)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, 256)
        self.register_buffer("mask", torch.triu(torch.full((ctx, ctx), float("-inf")), 1))

    def forward(self, x):
        t = x.shape[1]
        h = self.emb(x) + self.pos[:t]
        for b in self.blocks:
            h = b(h, self.mask[:t, :t])
        return self.head(self.lnf(h))


def loss_of(model, batch):
    logits = model(batch[:, :-1])
    return F.cross_entropy(logits.reshape(-1, 256), batch[:, 1:].reshape(-1))


def windows(data, starts, ctx):
    """Rows of ctx+1 bytes from data at the given offsets."""
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    idx = torch.as_tensor(starts).unsqueeze(1) + torch.arange(ctx + 1)
    return buf[idx].long()


@torch.no_grad()
def evaluate(model, eval_batches):
    model.eval()
    total = sum(loss_of(model, b).item() for b in eval_batches) / len(eval_batches)
    model.train()
    return total


def lr_factor(step, warmup, steps, floor=0.1):
    """Linear warm-up, then cosine decay to `floor` of the peak at the last step."""
    if step < warmup:
        return (step + 1) / warmup
    p = (step - warmup) / max(1, steps - warmup)
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * p))


class TextbookDiLoCo:
    """A CROSS-CHECK ONLY, not the demonstration's DiLoCo: the algorithm of arXiv 2311.08105 in a
    few lines of Python over strata.Comm (fragments 1, delay 0, f32 on the wire), to compare the
    library's results against. The demonstration runs strata.torch.DiLoCo."""

    def __init__(self, model, inner, comm, sync_every, outer_lr, outer_momentum, nesterov):
        self.params = [p for p in model.parameters()]
        self.inner, self.comm, self.h = inner, comm, sync_every
        flat = torch.cat([p.detach().reshape(-1) for p in self.params])
        comm.broadcast(flat, root=0)
        self._scatter(flat)
        self.glob = flat.clone()
        self.delta = torch.zeros_like(flat)
        self.mom = torch.zeros_like(flat)
        self.lr, self.mu, self.nesterov, self.steps = outer_lr, outer_momentum, nesterov, 0

    def _scatter(self, flat):
        off = 0
        with torch.no_grad():
            for p in self.params:
                p.copy_(flat[off : off + p.numel()].view_as(p))
                off += p.numel()

    def zero_grad(self):
        self.inner.zero_grad()

    def step(self):
        self.inner.step()
        self.steps += 1
        if self.steps % self.h:
            return
        local = torch.cat([p.detach().reshape(-1) for p in self.params])
        torch.sub(self.glob, local, out=self.delta)
        self.comm.allreduce(self.delta, op="avg")
        self.mom.mul_(self.mu).add_(self.delta)
        upd = self.delta.add(self.mom, alpha=self.mu) if self.nesterov else self.mom
        self.glob.sub_(upd, alpha=self.lr)
        self._scatter(self.glob)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["sync", "diloco"], required=True)
    ap.add_argument("--impl", choices=["strata", "textbook"], default="strata",
                    help="diloco: strata.torch.DiLoCo (the demonstration) or the Python cross-check")
    ap.add_argument("--name", default=None, help="the run's label in the report")
    ap.add_argument("--sync-every", type=int, default=50)
    ap.add_argument("--fragments", type=int, default=1)
    ap.add_argument("--delay", type=int, default=0)
    ap.add_argument("--alpha", type=float, default=0.5)
    ap.add_argument("--outer-lr", type=float, default=0.7)
    ap.add_argument("--outer-momentum", type=float, default=0.9)
    ap.add_argument("--compress", default="none")
    ap.add_argument("--steps", type=int, default=600, help="inner steps per rank")
    ap.add_argument("--batch", type=int, default=16, help="sequences per rank per step")
    ap.add_argument("--ctx", type=int, default=64)
    ap.add_argument("--d-model", type=int, default=192)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=6)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=50, help="inner lr: linear warm-up steps")
    ap.add_argument("--lr-floor", type=float, default=0.1,
                    help="inner lr: the cosine decays to this fraction of the peak at the last step")
    ap.add_argument("--sync-warmup", type=int, default=0,
                    help="diloco: the first N steps are synchronous data parallel (gradients "
                         "averaged every step, as --mode sync), DiLoCo starts from that model "
                         "(arXiv 2311.08105 starts from a synchronously pretrained model)")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=0.0,
                    help="clip each inner step's gradient to this global norm (0: no clipping)")
    ap.add_argument("--eval-every", type=int, default=50)
    ap.add_argument("--eval-seqs", type=int, default=64, help="sequences per checkpoint eval")
    ap.add_argument("--final-eval-seqs", type=int, default=512)
    ap.add_argument("--shard-chunk", type=int, default=4096,
                    help="bytes per chunk of the training text dealt to the ranks in turn")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--corpus", default="/usr/lib/python3.11/*.py")
    ap.add_argument("--netem", default=None,
                    help="the strata netem emulation's name: rank 0 reads its byte counters")
    ap.add_argument("--strata", default="strata", help="the strata command (for --netem)")
    ap.add_argument("--out", required=True, help="this rank's JSON (RANK is replaced by the rank)")
    a = ap.parse_args()

    torch.set_num_threads(1)
    comm = strata.Comm()
    rank, world = comm.rank, comm.size
    if a.mode == "diloco" and a.impl == "strata":
        import strata.torch as st  # before training: importing it under strata launch is collective

    train, held, nfiles = corpus(a.corpus)
    digest = hashlib.sha256(train + held).hexdigest()[:16]
    # Data parallel: the training text is cut into chunks dealt to the ranks in turn, so every
    # rank's shard is a different sample of the same distribution (contiguous halves of the
    # sorted files would give each rank different modules: non-IID data, another experiment).
    chunk = a.shard_chunk
    shard = b"".join(train[i : i + chunk] for i in range(rank * chunk, len(train), world * chunk))
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    ev = torch.Generator().manual_seed(a.seed)
    ebs = 16

    def eval_set(n):
        starts = torch.randint(0, len(held) - a.ctx - 1, (n,), generator=ev)
        return [windows(held, starts[i : i + ebs], a.ctx) for i in range(0, n, ebs)]

    final_eval = eval_set(a.final_eval_seqs)
    ckpt_eval = final_eval[: max(1, a.eval_seqs // ebs)]

    torch.manual_seed(a.seed)  # the same initial model on every rank
    model = ByteLM(a.d_model, a.layers, a.heads, a.ctx)
    nparams = sum(p.numel() for p in model.parameters())
    inner = torch.optim.AdamW(model.parameters(), lr=a.lr, betas=(0.9, 0.95),
                              weight_decay=a.weight_decay)
    # One schedule over the whole run, the synchronous warm-up included, the same for every mode.
    sched = torch.optim.lr_scheduler.LambdaLR(
        inner, lambda s: lr_factor(s, a.warmup, a.steps, a.lr_floor))

    params = list(model.parameters())
    if a.mode == "diloco" and not 0 <= a.sync_warmup < a.steps:
        sys.exit("train.py: --sync-warmup must be at least 0 and less than --steps")
    sync_steps = a.steps if a.mode == "sync" else a.sync_warmup
    flat_grad = None
    if sync_steps:
        # The gradients live in one flat buffer so one allreduce per step averages them all.
        flat_grad = torch.zeros(nparams)
        off = 0
        for p in params:
            p.grad = flat_grad[off : off + p.numel()].view_as(p)
            off += p.numel()
        flat = torch.cat([p.detach().reshape(-1) for p in params])
        comm.broadcast(flat, root=0)
        with torch.no_grad():
            off = 0
            for p in params:
                p.copy_(flat[off : off + p.numel()].view_as(p))
                off += p.numel()

    def start_diloco():
        """The DiLoCo optimizer over the model as it is now (after any synchronous warm-up)."""
        for p in params:
            p.grad = None  # the inner steps' gradients are each rank's own again
        if a.impl == "textbook":
            if a.fragments != 1 or a.delay != 0 or a.compress not in ("none", "default"):
                sys.exit("train.py: the textbook cross-check does fragments 1, delay 0, f32 only")
            return TextbookDiLoCo(model, inner, comm, a.sync_every, a.outer_lr, a.outer_momentum,
                                  True)
        return st.DiLoCo(model, inner, sync_every=a.sync_every, outer_lr=a.outer_lr,
                         outer_momentum=a.outer_momentum, nesterov=True, fragments=a.fragments,
                         delay=a.delay, alpha=a.alpha, compress=a.compress, comm=comm)

    opt = inner if sync_steps else start_diloco()

    stats0 = comm.stats()
    stats_warm = stats0
    comm.barrier()
    ip0 = netem_bytes(a.strata, a.netem) if rank == 0 else None
    train_loss, evals = [], []
    evals.append({"step": 0, "tokens": 0, "time_s": 0.0, "loss": evaluate(model, ckpt_eval)})
    elapsed, t0 = 0.0, time.perf_counter()
    tokens_per_step = a.batch * a.ctx * world  # every rank's tokens: what the job has consumed
    for step in range(1, a.steps + 1):
        starts = torch.randint(0, len(shard) - a.ctx - 1, (a.batch,), generator=gen)
        batch = windows(shard, starts, a.ctx)
        loss = loss_of(model, batch)
        if step <= sync_steps:
            opt.zero_grad(set_to_none=False)
            loss.backward()
            comm.allreduce(flat_grad, op="avg")
        else:
            opt.zero_grad()
            loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, a.clip)
        opt.step()
        sched.step()
        if step == sync_steps and a.mode == "diloco":
            stats_warm = comm.stats()
            opt = start_diloco()
        train_loss.append(loss.item())
        if step % a.eval_every == 0 or step == a.steps:
            elapsed += time.perf_counter() - t0
            evals.append({"step": step, "tokens": step * tokens_per_step, "time_s": elapsed,
                          "loss": evaluate(model, ckpt_eval)})
            if rank == 0:
                print(f"[{a.name or a.mode}] step {step}/{a.steps} train {loss.item():.3f} "
                      f"eval {evals[-1]['loss']:.3f} {elapsed:.1f}s", flush=True)
            t0 = time.perf_counter()
    comm.barrier()
    stats1 = comm.stats()
    wall = elapsed + time.perf_counter() - t0
    ip1 = netem_bytes(a.strata, a.netem) if rank == 0 else None

    # The final model: the ranks' mean (see the module's docstring), evaluated on rank 0.
    flat = torch.cat([p.detach().reshape(-1) for p in params])
    spread = flat.clone()
    comm.allreduce(flat, op="avg")
    spread.sub_(flat)
    with torch.no_grad():
        off = 0
        for p in params:
            p.copy_(flat[off : off + p.numel()].view_as(p))
            off += p.numel()
    final = evaluate(model, final_eval) if rank == 0 else None

    def diff(key, before=stats0):
        return stats1.get(key, 0) - before.get(key, 0) if key in stats1 else None

    wan = diff("wan_bytes_sent")
    wan_after_warmup = diff("wan_bytes_sent", stats_warm)
    out = {
        "name": a.name or a.mode, "rank": rank, "world": world, "site": os.environ.get("STRATA_SITE"),
        "config": {k: v for k, v in vars(a).items() if k != "out"},
        "params": nparams, "corpus_files": nfiles, "corpus_sha256_16": digest,
        "train_bytes": len(train), "eval_bytes": len(held),
        "tokens": a.steps * tokens_per_step, "wall_s": wall,
        "wire_bytes_sent": diff("wire_bytes_sent"), "data_bytes_sent": diff("data_bytes_sent"),
        "wan_bytes_sent": wan if wan is not None else diff("wire_bytes_sent"),
        "wan_bytes_source": "wan_bytes_sent" if wan is not None else "wire_bytes_sent",
        "sync_warmup_steps": a.sync_warmup if a.mode == "diloco" else a.steps,
        "wan_bytes_sent_after_sync_warmup": wan_after_warmup,
        "netem_ip_bytes": {k: ip1[k] - ip0.get(k, 0) for k in ip1} if ip0 is not None and ip1 else None,
        "final_param_spread_max": spread.abs().max().item(),
        "final_eval_loss": final, "evals": evals, "train_loss": train_loss,
    }
    if a.mode == "diloco" and a.impl == "strata":
        out["outer_steps"] = opt.outer_steps
    path = a.out.replace("RANK", str(rank))
    with open(path, "w") as f:
        json.dump(out, f)
    if rank == 0:
        print(f"[{out['name']}] final eval {final:.4f}  wan bytes {out['wan_bytes_sent']}  "
              f"wall {wall:.1f}s", flush=True)
    if hasattr(opt, "close"):
        opt.close()
    comm.destroy()


if __name__ == "__main__":
    main()
