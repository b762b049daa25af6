# SPDX-License-Identifier: Apache-2.0
"""DistributedDataParallel on "strata" against "gloo": the same model, seed and data.

The default group is "strata"; a gloo group over the same ranks is made beside it. Each rank
starts its model from a different seed (so DDP's initial broadcast matters), trains a copy on
each backend with the same batches, small buckets so several allreduces are in flight at once,
and at the end checks: the strata model's parameters are bitwise equal on every rank, and equal
to the gloo model's within f32 rounding. Exits 0 when both held, 1 otherwise, 77 without torch.
"""
import copy
import datetime
import sys

try:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import strata.torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

STEPS = 30
dist.init_process_group("strata", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
torch.set_num_threads(1)

torch.manual_seed(rank)  # different on each rank: DDP's broadcast from rank 0 must fix it
model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128),
                            torch.nn.ReLU(), torch.nn.Linear(128, 10))
on_strata = DDP(copy.deepcopy(model), bucket_cap_mb=0.02)  # ~5k floats a bucket: 9 buckets
on_gloo = DDP(copy.deepcopy(model), process_group=gloo, bucket_cap_mb=0.02)
optimizers = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m in (on_strata, on_gloo)]

data = torch.Generator().manual_seed(1000 + rank)
for step in range(STEPS):
    x = torch.randn(32, 64, generator=data)
    y = torch.randint(0, 10, (32,), generator=data)
    for m, opt in zip((on_strata, on_gloo), optimizers):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        opt.step()

ok = True
strata_flat = torch.cat([p.detach().flatten() for p in on_strata.parameters()])
gloo_flat = torch.cat([p.detach().flatten() for p in on_gloo.parameters()])
# every rank holds the same strata parameters, bit for bit (compared over the gloo group)
gathered = [torch.empty_like(strata_flat) for _ in range(size)]
dist.all_gather(gathered, strata_flat, group=gloo)
if not all(torch.equal(g, gathered[0]) for g in gathered):
    print(f"rank {rank}: the strata model's parameters differ between ranks", file=sys.stderr)
    ok = False
diff = (strata_flat - gloo_flat).abs().max().item()
scale = gloo_flat.abs().max().item()
start = torch.cat([p.detach().flatten() for p in model.parameters()])
moved = (gloo_flat - start).abs().max().item() if rank == 0 else float("nan")
# f32 rounding: sums taken in another order differ by a few ulps a step
if diff > 1e-5 * max(scale, 1.0):
    print(f"rank {rank}: strata and gloo models differ by {diff:.3g} (largest |p| {scale:.3g})",
          file=sys.stderr)
    ok = False
print(f"rank {rank}: {STEPS} steps, {strata_flat.numel()} parameters, max |strata - gloo| = "
      f"{diff:.3g}, largest |p| {scale:.3g}, rank 0 moved by up to {moved:.3g}: "
      f"{'PASS' if ok else 'FAIL'}")
dist.destroy_process_group()
sys.exit(0 if ok else 1)
