# SPDX-License-Identifier: Apache-2.0
"""strata.weights from Python (run under strata launch -n 3; needs torch, else exits 77).

Rank 0 publishes a small bf16 torch model (a torch tensor's storage bytes, plus a float32 numpy
array); ranks 1 and 2 subscribe into their own tensors. Checked on every rank:
1. after each of 5 versions (a few sparse updates of the bf16 weights) every subscriber's
   tensors equal the publisher's bit for bit (compared as int16 views);
2. the first version went as a full copy, the later ones as patches far smaller than it;
3. a subscriber whose set differs (another shape) gets MismatchError naming the tensor, and
   its tensors stay as they were;
4. prepare() before the first version: the chain's parents; no warm-up bytes, though asked
   for, since all ranks share one site (tests/test_weights.c checks them across sites).
Exits 0 when all held on this rank.
"""
import sys

import numpy as np

try:
    import torch
except ImportError:
    print("skipped: python3 has no torch")
    sys.exit(77)

import strata
import strata.weights as weights

comm = strata.Comm(timeout=5)
rank = comm.rank
failed = []


def check(cond, what):
    if not cond:
        failed.append(what)
        print(f"rank {rank}: FAILED {what}", flush=True)


def model_version(v):
    """Every rank computes version v of the publisher's model by itself."""
    g = torch.Generator().manual_seed(1234)
    w = torch.randn(256, 512, generator=g).to(torch.bfloat16)
    s = np.arange(1000, dtype=np.float32)
    for step in range(2, v + 1):
        mask = torch.rand(w.shape, generator=g) < 0.01
        w = torch.where(mask, (w.float() * 1.01).to(torch.bfloat16), w)
        s[step] = -step
    return w.contiguous(), s


def bits(t):
    return t.view(torch.int16).numpy().tobytes()


if rank == 0:
    w, s = model_version(1)
    weights._staged_device = lambda t: True  # the publisher's side of the staged path, forced
    pub = weights.Publisher({"w": w, "s": s}, anchor_every=8)
    weights._staged_device = lambda t: t.device.type != "cpu"
    check(len(pub._staged) == 1, "the publisher stages its torch tensor")
    prep = pub.prepare(comm, warm_bytes=1 << 20)
    check(prep["parent"] == -1 and prep["children"] == 1 and prep["refused"] == 0
          and prep["warm_bytes_sent"] == 0, f"the publisher's preparation: {prep}")
    for v in range(1, 6):
        nw, ns = model_version(v)
        w.copy_(nw)  # in place: the publisher reads this memory
        s[:] = ns
        check(pub.publish() == v, f"publish gave version {v}")
        info = pub.serve(comm)
        check(info["bytes_sent"] == info["stream_bytes"], "the publisher sent each byte once")
        st = pub.version_info(v)
        if v == 1:
            check(st["anchor"] == 1, "version 1 is a full copy")
        else:
            check(st["patch_bytes"] * 10 < st["full_bytes"],
                  f"v{v}: patch {st['patch_bytes']} B is not far below full {st['full_bytes']} B")
    info = pub.serve(comm)  # the mismatch round
    check(info["refused"] == 1, f"one subscriber refused (got {info['refused']})")
    pub.close()
else:
    w = torch.zeros(256, 512, dtype=torch.bfloat16)
    s = np.zeros(1000, dtype=np.float32)
    if rank == 2:  # a GPU tensor's path (a host copy, copied over after each update), forced
        weights._staged_device = lambda t: True
    sub = weights.Subscriber([("s", s), ("w", w)])
    weights._staged_device = lambda t: t.device.type != "cpu"
    check((rank == 2) == bool(sub._staged), f"rank {rank} stages {len(sub._staged)} tensors")
    prep = sub.prepare(comm, warm_bytes=1 << 20)
    check(prep["parent"] == rank - 1 and prep["warm_bytes_received"] == 0,
          f"rank {rank}'s preparation: {prep}")
    for v in range(1, 6):
        info = sub.update(comm)
        ew, es = model_version(v)
        check(sub.version == v and info["version"] == v, f"holds v{v}")
        check(bits(w) == bits(ew) and np.array_equal(s.view(np.int32), es.view(np.int32)),
              f"bit-exact at v{v}")
    sub.close()
    # the mismatch round: rank 1 subscribes to another shape, rank 2 to the right set
    if rank == 1:
        w2 = torch.full((256, 511), 7, dtype=torch.bfloat16)
        sub = weights.Subscriber({"w": w2, "s": s})
        try:
            sub.update(comm)
            check(False, "a mismatched set raised nothing")
        except strata.MismatchError as e:
            check("'w'" in str(e), f"the error names the tensor: {e}")
        check(bool((w2 == 7).all()), "a refused subscriber's tensor changed")
    else:
        sub = weights.Subscriber({"w": w, "s": s})
        sub.update(comm)  # nothing new since v5 was handed to another handle: it asks from 0
        check(sub.version == 5, "the second handle holds v5")
    sub.close()

comm.destroy()
print(f"rank {rank}: {'ok' if not failed else 'FAILED'}", flush=True)
sys.exit(1 if failed else 0)
