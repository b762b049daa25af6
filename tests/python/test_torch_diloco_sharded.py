# SPDX-License-Identifier: Apache-2.0
"""DiLoCo over FSDP2 shards: 2 sites x 2 ranks (run under strata launch -n 4).

1. A model wrapped by fully_shard over mesh["shard"] of a (site, shard) DeviceMesh, trained by
   strata.torch.DiLoCo with Streaming DiLoCo's fragments (P = 2) and a delay (tau = 1): each rank
   averages its shards with the same shard of the other site, over a communicator of its own.
   The result equals the same training of the unsharded model (strata.torch.DiLoCo over one rank
   per site, fed each site's whole batch) within f32 rounding, with the same fragment cut and
   outer step count; each rank's outer exchanges moved its shards only (its bytes exactly), and
   the site's ranks together sent what the unsharded site's one rank sent. Through host mirrors
   (the path of shards on a GPU, forced here on CPU shards) the result is the same to the bit.
2. Checkpoint and resume through torch.distributed.checkpoint, taken while an exchange is in
   flight: the resumed run's losses equal the uninterrupted run's exactly.
Exits 0 when all held on this rank.
"""
import os
import secrets
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

import strata
import strata.torch

dist.init_process_group("strata")
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with 4 ranks"
mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("site", "shard"))
site, shard = mesh.get_local_rank("site"), mesh.get_local_rank("shard")
ok = True
H, P, TAU, STEPS, ROWS = 4, 2, 1, 12, 8


def fail(text):
    global ok
    print(f"rank {rank}: {text}", file=sys.stderr)
    ok = False


def make_model():
    torch.manual_seed(0)  # 5 outputs: uneven shards (3 rows and 2)
    return torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.Tanh(), torch.nn.Linear(24, 24),
                               torch.nn.Tanh(), torch.nn.Linear(24, 5))


def batch(s, step):
    """Site s's batch at inner step `step` (the same wherever it is computed)."""
    g = torch.Generator().manual_seed(1000 * s + step)
    x = torch.randn(ROWS, 16, generator=g)
    return x, torch.sin(x[:, :5] * 2.0) + 0.1 * s


def sharded(**options):
    model = make_model()
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh["shard"])
    fully_shard(model, mesh=mesh["shard"])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    d = strata.torch.DiLoCo(model, opt, sync_every=H, fragments=P, delay=TAU, **options)
    return model, opt, d


def train(model, d, first, last):
    losses = []
    for step in range(first, last + 1):
        x, y = batch(site, step)
        half = slice(shard * ROWS // 2, (shard + 1) * ROWS // 2)
        d.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x[half]), y[half])
        loss.backward()
        d.step()
        losses.append(loss.item())
    return losses


# ---- 1. sharded against unsharded ----
model, opt, d = sharded()
if type(d).__name__ != "ShardedDiLoCo" or \
        (d.site, d.sites, d.shard, d.shards) != (site, 2, shard, 2):
    fail(f"strata.torch.DiLoCo did not take the sharded shape: {d!r}")
if d.comm.size != 2 or d.comm.rank != site:
    fail(f"shard communicator: rank {d.comm.rank} of {d.comm.size}, want {site} of 2")
local_elems = sum(p.to_local().numel() for p in model.parameters())
sent0 = d.comm.stats()
train(model, d, 1, STEPS)
sent1 = d.comm.stats()
sent = {k: sent1[k] - sent0[k] for k in ("data_bytes_sent", "wire_bytes_sent")}
# each started exchange moved this rank's shards of its fragment once (f32; a 2-rank average
# sends each rank's buffer once): the rank's bytes are its shards' exchanges, never the model's
frag_elems = [sum(p.to_local().numel() for p in list(model.parameters())[a:a + n])
              for a, n in d._cuts]
started = [sum(1 for s in range(1, STEPS + 1) if s % H == f * H // P) for f in range(P)]
want_bytes = 4 * sum(e * k for e, k in zip(frag_elems, started))
print(f"rank {rank}: shard exchanges sent {sent['data_bytes_sent']} data bytes "
      f"({sent['wire_bytes_sent']} on the wire), the shards' f32 bytes per exchange x "
      f"exchanges: {want_bytes}")
if sent["data_bytes_sent"] != want_bytes:
    fail(f"the shard communicator sent {sent['data_bytes_sent']} bytes, want {want_bytes}")
outer = d.outer_steps
full = [p.full_tensor().detach().clone() for p in model.parameters()]
cuts = d._cuts
# the site's shards add up to the model, each exchanged once: shard bytes over the two ranks
totals = torch.tensor([local_elems, sent["data_bytes_sent"]], dtype=torch.int64)
dist.all_reduce(totals, group=mesh["shard"].get_group())
if int(totals[0]) != sum(t.numel() for t in full):
    fail(f"the site's shards hold {int(totals[0])} elements, the model "
         f"{sum(t.numel() for t in full)}")
d.close()
# the device path (host mirrors of the shards), forced on CPU shards: the same bytes
model, opt, d = sharded(_mirror_all=True)
train(model, d, 1, STEPS)
mirrored = [p.full_tensor().detach().clone() for p in model.parameters()]
d.close()
if not all(torch.equal(a, b) for a, b in zip(full, mirrored)):
    fail("training through host mirrors differs from training in place")

if shard == 0:  # the unsharded reference: one rank per site, the site's whole batch
    store = dist.PrefixStore("reference", dist.distributed_c10d._get_default_store())
    if site == 0:
        store.set("job", f"ref-{secrets.token_hex(6)}")
    comm = strata.Comm(store=store, rank=site, world_size=2, job_id=store.get("job").decode())
    ref = make_model()
    ropt = torch.optim.AdamW(ref.parameters(), lr=1e-2)
    rd = strata.torch.DiLoCo(ref, ropt, sync_every=H, fragments=P, delay=TAU, comm=comm)
    ref0 = comm.stats()["data_bytes_sent"]
    for step in range(1, STEPS + 1):
        x, y = batch(site, step)
        rd.zero_grad()
        torch.nn.functional.mse_loss(ref(x), y).backward()
        rd.step()
    ref_bytes = comm.stats()["data_bytes_sent"] - ref0
    if ref_bytes != int(totals[1]):  # a site sends the model once per exchange, split
        fail(f"the site's two ranks sent {int(totals[1])} bytes, the unsharded rank {ref_bytes}")
    else:
        print(f"rank {rank}: the site's ranks sent {int(totals[1])} bytes together, as the "
              f"unsharded site's one rank")
    ref_cuts = [tuple(r) for r in rd._ranges]
    if ref_cuts != cuts:
        fail(f"fragment cut {cuts}, the unsharded one {ref_cuts}")
    # per rank, the unsharded DiLoCo counts each fragment once; the sharded one counts each
    # fragment with a shard here once too
    if rd.outer_steps != outer:
        fail(f"outer steps {outer}, the unsharded run's {rd.outer_steps}")
    worst = max(float((a - b.detach()).abs().max()) for a, b in zip(full, ref.parameters()))
    scale = max(float(b.detach().abs().max()) for b in ref.parameters())
    print(f"rank {rank}: sharded vs unsharded after {STEPS} steps (H={H} P={P} tau={TAU}): "
          f"max |diff| {worst:.3g} (largest parameter {scale:.3g}), {outer} outer steps")
    if not worst <= 1e-5 * scale:
        fail(f"the sharded model differs from the unsharded one by {worst}")
    moved = any(float((a - b).abs().max()) > 0 for a, b in
                zip(full, [p.detach() for p in make_model().parameters()]))
    if not moved:
        fail("training did not change the model")
    rd.close()
    comm.destroy()
dist.barrier()


# ---- 2. checkpoint with an exchange in flight, resume, same losses ----
class App(Stateful):
    def __init__(self, model, opt, d):
        self.model, self.opt, self.d = model, opt, d

    def state_dict(self):
        msd, osd = get_state_dict(self.model, self.opt)
        return {f"site{site}": {"model": msd, "optim": osd}, "diloco": self.d.state_dict()}

    def load_state_dict(self, sd):
        mine = sd[f"site{site}"]
        set_state_dict(self.model, self.opt, model_state_dict=mine["model"],
                       optim_state_dict=mine["optim"])
        self.d.load_state_dict(sd["diloco"])


CUT = 8  # fragment 0 starts after step 8 and is applied after step 9: in flight at the save
root = tempfile.mkdtemp(prefix="strata-dcp-") if rank == 0 else None
holder = [root]
dist.broadcast_object_list(holder, src=0)
path = os.path.join(holder[0], "ckpt")
model, opt, d = sharded()
train(model, d, 1, CUT)
if not d._in_flight:
    fail("no exchange in flight at the checkpoint")
dcp.save({"app": App(model, opt, d)}, checkpoint_id=path)
straight = train(model, d, CUT + 1, STEPS + 2)
d.close()

model, opt, d = sharded()
dcp.load({"app": App(model, opt, d)}, checkpoint_id=path)
if d.inner_steps != CUT:
    fail(f"resumed at inner step {d.inner_steps}, want {CUT}")
resumed = train(model, d, CUT + 1, STEPS + 2)
d.close()
if resumed != straight:
    fail(f"resumed losses {resumed} differ from the uninterrupted {straight}")
else:
    print(f"rank {rank}: resumed run's {len(resumed)} losses equal the uninterrupted run's "
          f"(last {resumed[-1]!r})")
dist.barrier()
if rank == 0:
    shutil.rmtree(holder[0], ignore_errors=True)
dist.destroy_process_group()
print(f"rank {rank}: {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
