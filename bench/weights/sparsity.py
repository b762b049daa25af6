#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/weights/sparsity.py — how sparse a real RL-like update is in bf16 (issue 30, point 5).

A byte-level decoder-only transformer (the Python standard library's own source as text, as in
bench/diloco/train.py) is trained with Adam from fp32 master weights, as RL trainers do, and
after every step the weights a rollout worker would receive — the bf16 cast — are published
with strata.weights. Per step it records the fraction of bf16 elements whose bits changed and
the sizes strata's encoder chose (full copy, zstd patch), for each learning rate given.

It also saves each run's update sequence (the initial bf16 weights, then per step the flat
indices and new bf16 bits of the changed elements) so a benchmark replays exactly these updates
instead of a synthetic random mask: OUT/lr<lr>.npz with OUT/lr<lr>.json describing the tensors.

  /usr/bin/python3 bench/weights/sparsity.py --out DIR [--lr 1e-6 1e-5] [--steps 40]
      [--d-model 256 --layers 4]

PYTHONPATH must reach strata (build/python). Prints one table per learning rate and writes
DIR/summary.json.
"""
import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn

import strata.weights as weights


def corpus(limit_bytes=4 << 20):
    data = bytearray()
    for path in sorted(glob.glob("/usr/lib/python3.11/*.py")):
        with open(path, "rb") as f:
            data += f.read()
        if len(data) >= limit_bytes:
            break
    if not data:
        sys.exit("sparsity.py: no text under /usr/lib/python3.11 to train on")
    return torch.tensor(list(data[:limit_bytes]), dtype=torch.long)


class Model(nn.Module):
    def __init__(self, d_model, layers, heads, context):
        super().__init__()
        self.embed = nn.Embedding(256, d_model)
        self.position = nn.Parameter(torch.randn(context, d_model) * 0.02)
        layer = nn.TransformerEncoderLayer(d_model, heads, 4 * d_model, dropout=0.0,
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 256)
        mask = torch.triu(torch.full((context, context), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        h = self.embed(x) + self.position[: x.shape[1]]
        return self.head(self.norm(self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]])))


def run(lr, args, text, out_dir):
    torch.manual_seed(args.seed)
    model = Model(args.d_model, args.layers, args.heads, args.context)
    params = [(name, p) for name, p in model.named_parameters()]
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999))
    # what rollout workers hold: the bf16 cast of the master weights
    published = {name: p.detach().to(torch.bfloat16).contiguous() for name, p in params}
    publisher = weights.Publisher(published, anchor_every=10**6, history=2)
    total = sum(t.numel() for t in published.values())
    flat = lambda: torch.cat([published[n].view(torch.int16).flatten() for n, _ in params])  # noqa
    before = flat().numpy().copy()
    init = before.copy()
    v1 = publisher.publish()
    full_bytes = publisher.version_info(v1)["full_bytes"]
    g = torch.Generator().manual_seed(args.seed + 1)
    rows, sequence = [], {}
    for step in range(1, args.steps + 1):
        starts = torch.randint(0, len(text) - args.context - 1, (args.batch,), generator=g)
        x = torch.stack([text[s : s + args.context] for s in starts])
        y = torch.stack([text[s + 1 : s + args.context + 1] for s in starts])
        loss = nn.functional.cross_entropy(model(x).reshape(-1, 256), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        with torch.no_grad():
            for name, p in params:
                published[name].copy_(p.detach().to(torch.bfloat16))
        t0 = time.perf_counter()
        version = publisher.publish()
        publish_s = time.perf_counter() - t0
        st = publisher.version_info(version)
        after = flat().numpy()
        changed = np.flatnonzero(after != before).astype(np.uint32)
        if len(changed) != st["changed"]:
            sys.exit(f"step {step}: strata counted {st['changed']} changed elements, numpy "
                     f"{len(changed)}")
        sequence[f"idx{step}"] = changed
        sequence[f"val{step}"] = after[changed].view(np.uint16)
        before = after.copy()
        rows.append({"step": step, "loss": float(loss), "changed": int(st["changed"]),
                     "changed_fraction": st["changed"] / total, "patch_bytes": st["patch_bytes"],
                     "patch_raw_bytes": st["patch_raw_bytes"], "full_bytes": full_bytes,
                     "encode_s": st["encode_s"], "hash_s": st["hash_s"], "publish_s": publish_s})
        print(f"lr {lr:g} step {step:3d}  loss {float(loss):.3f}  changed "
              f"{100 * st['changed'] / total:7.3f}%  patch {st['patch_bytes']:>10,} B  "
              f"({st['patch_bytes'] / full_bytes:7.4f} of full)  encode {1e3 * st['encode_s']:.1f} "
              f"ms  hash {1e3 * st['hash_s']:.1f} ms", flush=True)
    publisher.close()
    tag = f"lr{lr:g}"
    np.savez_compressed(os.path.join(out_dir, tag + ".npz"), init=init.view(np.uint16),
                        **sequence)
    layout, offset = [], 0
    for name, p in params:
        layout.append({"name": name, "shape": list(p.shape), "offset": offset})
        offset += p.numel()
    meta = {"lr": lr, "elements": total, "full_bytes": full_bytes, "steps": rows,
            "tensors": layout, "config": vars(args)}
    with open(os.path.join(out_dir, tag + ".json"), "w") as f:
        json.dump(meta, f, indent=1)
    return meta


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lr", type=float, nargs="+", default=[1e-6, 1e-5])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    text = corpus()
    summary = []
    for lr in args.lr:
        meta = run(lr, args, text, args.out)
        steps = meta["steps"][1:]  # the first step moves every zero-initialised bias: not typical
        frac = [s["changed_fraction"] for s in steps]
        ratio = [s["patch_bytes"] / s["full_bytes"] for s in steps]
        summary.append({"lr": lr, "elements": meta["elements"], "full_bytes": meta["full_bytes"],
                        "changed_fraction_median": float(np.median(frac)),
                        "changed_fraction_max": float(max(frac)),
                        "patch_over_full_median": float(np.median(ratio)),
                        "patch_over_full_max": float(max(ratio)),
                        "step1_changed_fraction": meta["steps"][0]["changed_fraction"]})
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print()
    print(f"{'lr':>8} {'params':>10} {'full B':>12} {'changed (median, max)':>24} "
          f"{'patch/full (median, max)':>26}")
    for s in summary:
        print(f"{s['lr']:8g} {s['elements']:10,} {s['full_bytes']:12,} "
              f"{100 * s['changed_fraction_median']:10.3f}% {100 * s['changed_fraction_max']:10.3f}% "
              f"{s['patch_over_full_median']:12.4f} {s['patch_over_full_max']:12.4f}")
    print("(steps 2.. ; step 1 moves every zero-initialised bias and is reported apart)")


if __name__ == "__main__":
    main()
