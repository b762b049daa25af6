# SPDX-License-Identifier: Apache-2.0
"""torch's parallel training stacks on "strata" against "gloo", 4 ranks: DDP with comm hooks,
FSDP2 (fully_shard) over all ranks, HSDP on a 2 x 2 DeviceMesh ("replicate", "shard"), and a
torch.distributed.checkpoint (DCP) save and load.

Each stack trains the same small transformer, from the same start, on the same batches (each
rank its own) twice: over a strata mesh or group and over a gloo one (backend_override, or a
gloo group for DDP). It checks that the two end with the same parameters within f32 rounding
and that every replica holds the same bits. The DCP checkpoint of the FSDP2 model (parameters
and optimizer state) is saved over strata and loaded into a fresh model, which must then equal
the saved one bit for bit. Exits 0 when every check held on this rank, 1 otherwise, 77 without
torch. The default group is "strata" and nothing imports strata (see test_torch_ops.py).
"""
import copy
import datetime
import os
import shutil
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor
    from torch.nn.parallel import DistributedDataParallel as DDP
    if os.environ.get("STRATA_TEST_IMPORT") == "1":
        import strata.torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

STEPS = 4
VOCAB, WIDTH, SEQ, BATCH = 64, 32, 16, 4
dist.init_process_group("strata", timeout=datetime.timedelta(seconds=120))
rank, size = dist.get_rank(), dist.get_world_size()
if size != 4:
    print("run with 4 ranks (a 2 x 2 mesh)")
    sys.exit(1)
torch.set_num_threads(1)
gloo = dist.new_group(backend="gloo")
failures = []


class TinyTransformer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(WIDTH, 4, 2 * WIDTH, dropout=0.0, batch_first=True)
            for _ in range(2))
        self.head = torch.nn.Linear(WIDTH, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


torch.manual_seed(0)
START = TinyTransformer()


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    tokens = torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g)
    return tokens[:, :-1], tokens[:, 1:]


def train(model, steps=STEPS):
    # SGD is linear in the gradients, so sums taken in another order stay a few ulps apart
    # (Adam's normalisation would magnify them where a gradient is near zero)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten()).backward()
        opt.step()
    return opt


def full(param):
    return param.full_tensor() if isinstance(param, DTensor) else param


def flat(model):
    return torch.cat([full(p).detach().flatten() for p in model.parameters()])


def compare(name, on_strata, on_gloo, tolerance=1e-5):
    a, b = flat(on_strata), flat(on_gloo)
    moved = (a - flat(START)).abs().max().item()
    diff = (a - b).abs().max().item()
    if moved < 1e-4:
        failures.append(f"{name}: the model did not train")
    if diff > tolerance * max(b.abs().max().item(), 1.0):
        failures.append(f"{name}: strata and gloo differ by {diff:.3g}")
    gathered = [torch.empty_like(a) for _ in range(size)]
    dist.all_gather(gathered, a, group=gloo)  # every replica the same bits, seen through gloo
    if not all(torch.equal(g, gathered[0]) for g in gathered):
        failures.append(f"{name}: the strata replicas differ")
    print(f"rank {rank}: {name}: moved {moved:.3g}, max |strata - gloo| {diff:.3g}", flush=True)


# DDP, with the default allreduce hook and the fp16 compression hook (whose sums each backend
# rounds to f16 its own way: a wider bound)
for hook, tolerance in ((default_hooks.allreduce_hook, 1e-5),
                        (default_hooks.fp16_compress_hook, 1e-3)):
    models = []
    for group in (None, gloo):
        model = DDP(copy.deepcopy(START), process_group=group, bucket_cap_mb=0.05)
        model.register_comm_hook(group, hook)
        train(model)
        models.append(model.module)
    compare(f"DDP {hook.__name__}", *models, tolerance=tolerance)


def sharded(mesh):
    model = copy.deepcopy(START)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


# FSDP2 over the 4 ranks
fsdp = {}
for backend in ("strata", "gloo"):
    mesh = init_device_mesh("cpu", (size,), backend_override={0: backend})
    model = sharded(mesh)
    fsdp[backend] = (model, train(model))
compare("FSDP2", fsdp["strata"][0], fsdp["gloo"][0])

# HSDP: replicate across the first dimension, shard across the second
hsdp = {}
for backend in ("strata", "gloo"):
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"),
                            backend_override={0: backend, 1: backend})
    if backend == "strata" and dist.get_backend(mesh.get_group("shard")) != "strata":
        failures.append("the mesh's shard dimension is not on strata")
    model = sharded(mesh)
    hsdp[backend] = model
    train(model)
compare("HSDP 2x2", hsdp["strata"], hsdp["gloo"])

# DCP: save the FSDP2 model and its optimizer over strata, load into a fresh one
box = [tempfile.mkdtemp(prefix="strata-dcp-") if rank == 0 else None]
dist.broadcast_object_list(box, src=0)
path = box[0]
model, opt = fsdp["strata"]
model_state, opt_state = get_state_dict(model, opt)
dcp.save({"model": model_state, "optim": opt_state}, checkpoint_id=path)
mesh = init_device_mesh("cpu", (size,))
fresh = sharded(mesh)
fresh_opt = train(fresh, steps=1)  # other weights, and optimizer state to overwrite
fresh_model_state, fresh_opt_state = get_state_dict(fresh, fresh_opt)
loaded = {"model": fresh_model_state, "optim": fresh_opt_state}
dcp.load(loaded, checkpoint_id=path)
set_state_dict(fresh, fresh_opt, model_state_dict=loaded["model"],
               optim_state_dict=loaded["optim"])
for (name, a), b in zip(model.named_parameters(), fresh.parameters()):
    if not torch.equal(a.to_local(), b.to_local()):
        failures.append(f"DCP: {name} differs after load")
before = [opt.state[p]["momentum_buffer"].to_local() for p in model.parameters()]
after = [fresh_opt.state[p]["momentum_buffer"].to_local() for p in fresh.parameters()]
if len(before) != len(after) or not all(torch.equal(a, b) for a, b in zip(before, after)):
    failures.append("DCP: the optimizer state differs after load")
dist.barrier()
if rank == 0:
    shutil.rmtree(path, ignore_errors=True)

dist.destroy_process_group()
print(f"rank {rank}: {'PASS' if not failures else 'FAIL ' + '; '.join(failures)}", flush=True)
sys.exit(1 if failures else 0)
