# SPDX-License-Identifier: Apache-2.0
"""strata with CUDA tensors, 2 ranks on one GPU or one each (scripts/gpu-check.sh runs it; the
suite runs it too and it skips, 77, without CUDA, naming why).

Every tensor here lives on the GPU: all_reduce (sum, several sizes), broadcast, all_gather,
reduce_scatter, all_to_all and async work through the backend's pinned host staging, checked
against values computed on the GPU; DDP on a small model against the same training on CPU
tensors over the same backend; strata.torch.DiLoCo over a CUDA model against the same DiLoCo on
CPU (bitwise: the outer step runs on the host either way); strata.weights from a CUDA tensor to
a CUDA tensor; strata.kv READ into a CUDA tensor. Exits 0 when all held, 1 otherwise.
"""
import copy
import datetime
import os
import sys

try:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)
if not torch.cuda.is_available():
    print("skipped: this torch sees no CUDA device (scripts/gpu-check.sh runs this on a GPU)")
    sys.exit(77)
import strata
import strata.torch
import strata.weights as weights

local = int(os.environ.get("LOCAL_RANK", "0"))
device = torch.device("cuda", local % torch.cuda.device_count())
torch.cuda.set_device(device)
dist.init_process_group("strata", timeout=datetime.timedelta(seconds=120), device_id=device)
rank, size = dist.get_rank(), dist.get_world_size()
failures = []


def check(ok, what):
    print(f"rank {rank}: {'PASS' if ok else 'FAIL'}: {what}", flush=True)
    if not ok:
        failures.append(what)


for n in (1, 1000, 1 << 20):
    t = torch.full((n,), float(rank + 1), device=device)
    dist.all_reduce(t)
    check(bool((t == size * (size + 1) / 2).all()) and t.is_cuda, f"all_reduce of {n} on cuda")
t = torch.arange(64, device=device, dtype=torch.float32) * (rank + 1)
work = dist.all_reduce(t, async_op=True)
work.wait()
check(torch.equal(t, torch.arange(64, device=device, dtype=torch.float32) * sum(range(1, size + 1))),
      "async all_reduce on cuda")
t = torch.full((8,), float(rank), device=device, dtype=torch.bfloat16)
dist.broadcast(t, src=size - 1)
check(bool((t == size - 1).all()), "broadcast on cuda")
out = torch.empty(size * 4, device=device)
dist.all_gather_into_tensor(out, torch.full((4,), float(rank), device=device))
check(torch.equal(out, torch.arange(size, device=device).repeat_interleave(4).float()),
      "all_gather_into_tensor on cuda")
out = torch.empty(4, device=device)
dist.reduce_scatter_tensor(out, torch.ones(size * 4, device=device))
check(bool((out == size).all()), "reduce_scatter_tensor on cuda")
out = torch.empty(size, device=device)
dist.all_to_all_single(out, torch.full((size,), float(rank), device=device))
check(torch.equal(out, torch.arange(size, device=device).float()), "all_to_all_single on cuda")
# recv from any source into a CUDA tensor (staged through the host as recv is)
if rank == 0:
    got = torch.empty(16, device=device)
    src = dist.recv(got)
    check(src == size - 1 and torch.equal(got, torch.full((16,), float(size - 1), device=device)),
          f"recv from any source on cuda (from rank {src})")
elif rank == size - 1:
    dist.send(torch.full((16,), float(rank), device=device), dst=0)

# DDP on the GPU against DDP on the CPU, same backend, same data
torch.manual_seed(0)
base = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
on_gpu = DDP(copy.deepcopy(base).to(device), device_ids=[device.index])
on_cpu = DDP(copy.deepcopy(base))
opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (on_gpu, on_cpu)]
g = torch.Generator().manual_seed(rank)
for _ in range(5):
    x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
    for m, opt, dev in ((on_gpu, opts[0], device), (on_cpu, opts[1], torch.device("cpu"))):
        opt.zero_grad()
        torch.nn.functional.mse_loss(m(x.to(dev)), y.to(dev)).backward()
        opt.step()
diff = max((a.detach().cpu() - b.detach()).abs().max().item()
           for a, b in zip(on_gpu.parameters(), on_cpu.parameters()))
check(diff < 1e-4, f"DDP on cuda matches DDP on cpu (max diff {diff:.3g})")

# DiLoCo over a CUDA model against the same on CPU: bitwise (the outer step is on the host)
ends = []
for dev in (device, torch.device("cpu")):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4))
    model.to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    with strata.torch.DiLoCo(model, opt, sync_every=2, fragments=2, delay=1) as diloco:
        gen = torch.Generator().manual_seed(10 + rank)
        for _ in range(9):
            x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
            diloco.zero_grad()
            torch.nn.functional.mse_loss(model(x.to(dev)), y.to(dev)).backward()
            diloco.step()
        ends.append((torch.cat([p.detach().cpu().flatten() for p in model.parameters()]),
                     diloco.outer_steps))
check(ends[0][1] == ends[1][1] > 0 and torch.allclose(ends[0][0], ends[1][0], atol=1e-5),
      f"DiLoCo on cuda: {ends[0][1]} outer steps, as on cpu")

# RL weights: rank 0 publishes a CUDA tensor, the others update a CUDA tensor
with strata.Comm() as comm:
    w = torch.randn(1000, device=device).to(torch.bfloat16) if rank == 0 else \
        torch.zeros(1000, device=device, dtype=torch.bfloat16)
    if rank == 0:
        with weights.Publisher({"w": w}) as pub:
            pub.publish()
            pub.serve(comm)
    else:
        with weights.Subscriber({"w": w}) as sub:
            sub.update(comm)
    got = [torch.empty(1000, device=device, dtype=torch.bfloat16) for _ in range(size)]
    dist.all_gather(got, w)
    check(all(torch.equal(x, got[0]) for x in got) and bool(got[0].abs().sum() > 0),
          "strata.weights from a cuda tensor to cuda tensors")

dist.destroy_process_group()
print(f"rank {rank}: {'PASS' if not failures else 'FAIL ' + '; '.join(failures)}", flush=True)
sys.exit(1 if failures else 0)
