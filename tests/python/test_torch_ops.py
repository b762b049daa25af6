# SPDX-License-Identifier: Apache-2.0
"""Every operation of the torch.distributed backend "strata", checked (any rank count >= 2).

Runs under `strata launch -n N` and under torchrun. all_reduce with every op on every dtype;
broadcast, reduce, all_gather (list, into_tensor), reduce_scatter (list, tensor), all_to_all
(single, list), gather, scatter from two roots; barrier; send/recv, blocking and async;
async work with its future; a new_group of two ranks. Exits 0 when every check held on this
rank, 1 otherwise, 77 when python3 has no torch or strata.torch was not built.
"""
import datetime
import sys

try:
    import torch
    import torch.distributed as dist
    import strata.torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int32, torch.int64]
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6,
             torch.float64: 1e-12}
N = 37  # elements per rank: not a multiple of anything the algorithms chunk by

dist.init_process_group("strata", timeout=datetime.timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()
failures = []


def check(name, got, want):
    want = want.to(torch.float64)
    got = got.to(torch.float64)
    tol = TOLERANCE.get(want.dtype, 0.0)
    if got.shape != want.shape or not torch.allclose(got, want, rtol=tol, atol=tol):
        failures.append(name)
        print(f"rank {rank}: {name}: got {got.flatten()[:6].tolist()}, "
              f"want {want.flatten()[:6].tolist()}", file=sys.stderr)


def values(r, dtype, count=N, small=False):
    """Exact in every dtype: small integers that depend on the rank and the index."""
    idx = torch.arange(count, dtype=torch.int64)
    v = idx % 2 + 1 if small else idx % 5 + r + 1
    return v.to(dtype)


def expected_reduce(op, dtype, count=N):
    stack = torch.stack([values(r, torch.int64, count, op == "product") for r in range(size)])
    if op == "sum":
        out = stack.sum(0)
    elif op == "product":
        out = stack.prod(0)
    elif op == "min":
        out = stack.min(0).values
    elif op == "max":
        out = stack.max(0).values
    else:  # avg: integer division for integer types, as strata.h says
        total = stack.sum(0)
        out = total // size if not dtype.is_floating_point else total.to(torch.float64) / size
    return out.to(torch.float64)


OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "product": dist.ReduceOp.PRODUCT,
       "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}

for dtype in DTYPES:
    for name, op in OPS.items():
        t = values(rank, dtype, small=name == "product")
        dist.all_reduce(t, op=op)
        check(f"all_reduce {name} {dtype}", t, expected_reduce(name, dtype))

    for root in (0, size - 1):
        t = values(rank, dtype) if rank == root else torch.zeros(N, dtype=dtype)
        dist.broadcast(t, src=root)
        check(f"broadcast root {root} {dtype}", t, values(root, dtype))

    inp = values(rank, dtype)
    out = torch.empty(size * N, dtype=dtype)
    dist.all_gather_into_tensor(out, inp)
    check(f"all_gather_into_tensor {dtype}", out,
          torch.cat([values(r, dtype) for r in range(size)]))

# reduce, both ops that keep the sum exact and one that does not sum
for root in (0, size - 1):
    for name in ("sum", "max"):
        t = values(rank, torch.float32)
        dist.reduce(t, dst=root, op=OPS[name])
        want = expected_reduce(name, torch.float32) if rank == root else values(rank, torch.float32)
        check(f"reduce {name} root {root}", t, want)

# all_gather, list form, 2-D tensors
inp = values(rank, torch.float32, 12).view(3, 4)
outs = [torch.empty(3, 4) for _ in range(size)]
dist.all_gather(outs, inp)
for r in range(size):
    check(f"all_gather list [{r}]", outs[r], values(r, torch.float32, 12).view(3, 4))

# all_gather_into_tensor with a 2-D output (size x N)
out = torch.empty(size, N, dtype=torch.int32)
dist.all_gather_into_tensor(out, values(rank, torch.int32))
check("all_gather_into_tensor 2-D", out, torch.stack([values(r, torch.int32) for r in range(size)]))


# reduce_scatter: rank r's block b holds values(r) + 10*b; rank b receives sum over r
def rs_block(r, b):
    return values(r, torch.float32) + 10 * b


want = sum(rs_block(r, rank) for r in range(size))
out = torch.empty(N)
dist.reduce_scatter(out, [rs_block(rank, b) for b in range(size)])
check("reduce_scatter list", out, want)
out = torch.empty(N)
dist.reduce_scatter_tensor(out, torch.cat([rs_block(rank, b) for b in range(size)]))
check("reduce_scatter_tensor", out, want)
out = torch.empty(N, dtype=torch.int64)
dist.reduce_scatter_tensor(out, torch.cat([rs_block(rank, b) for b in range(size)]).long(),
                           op=dist.ReduceOp.MAX)
check("reduce_scatter_tensor max", out,
      torch.stack([rs_block(r, rank) for r in range(size)]).max(0).values)


# all_to_all: block j of rank i's input is a2a(i, j); lands as block i of rank j's output
def a2a(i, j):
    return torch.full((N,), float(100 * i + j))


inp = torch.cat([a2a(rank, j) for j in range(size)])
out = torch.empty(size * N)
dist.all_to_all_single(out, inp)
check("all_to_all_single", out, torch.cat([a2a(i, rank) for i in range(size)]))
out = torch.empty(size * N)
dist.all_to_all_single(out, inp, output_split_sizes=[N] * size, input_split_sizes=[N] * size)
check("all_to_all_single even splits", out, torch.cat([a2a(i, rank) for i in range(size)]))
outs = [torch.empty(N) for _ in range(size)]
dist.all_to_all(outs, [a2a(rank, j) for j in range(size)])
check("all_to_all list", torch.cat(outs), torch.cat([a2a(i, rank) for i in range(size)]))

# gather and scatter from two roots
for root in (0, size - 1):
    inp = values(rank, torch.float64)
    outs = [torch.empty(N, dtype=torch.float64) for _ in range(size)] if rank == root else None
    dist.gather(inp, gather_list=outs, dst=root)
    if rank == root:
        check(f"gather root {root}", torch.cat(outs),
              torch.cat([values(r, torch.float64) for r in range(size)]))
    out = torch.empty(N, dtype=torch.int32)
    ins = [values(r, torch.int32) * 3 for r in range(size)] if rank == root else None
    dist.scatter(out, scatter_list=ins, src=root)
    check(f"scatter root {root}", out, values(rank, torch.int32) * 3)

dist.barrier()

# point to point: blocking 0 -> 1, then an async ring
if rank == 0:
    dist.send(values(0, torch.float32), dst=1)
elif rank == 1:
    got = torch.empty(N)
    dist.recv(got, src=0)
    check("send/recv blocking", got, values(0, torch.float32))
got = torch.empty(N, dtype=torch.bfloat16)
works = [dist.isend(values(rank, torch.bfloat16), dst=(rank + 1) % size),
         dist.irecv(got, src=(rank - 1) % size)]
for w in works:
    w.wait()
check("isend/irecv ring", got, values((rank - 1) % size, torch.bfloat16))

# async work: is_completed after wait; the future carries the output
t = values(rank, torch.float32)
work = dist.all_reduce(t, async_op=True)
future = work.get_future()
work.wait()
if not work.is_completed():
    failures.append("async work not completed after wait")
check("async all_reduce", t, expected_reduce("sum", torch.float32))
check("async all_reduce future", future.wait()[0], expected_reduce("sum", torch.float32))

# several operations in flight at once complete each with its own result
pending = [(torch.full((1000,), float(rank + k)), k) for k in range(8)]
works = [dist.all_reduce(t, async_op=True) for t, _ in pending]
for w in works:
    w.wait()
for t, k in pending:
    check(f"in flight {k}", t, torch.full((1000,), float(sum(r + k for r in range(size)))))

# a group of ranks 0 and 1 (torch's new_group: a communicator of its own)
pair = dist.new_group([0, 1], backend="strata")
if rank < 2:
    t = torch.full((N,), float(rank + 1))
    dist.all_reduce(t, group=pair)
    check("new_group all_reduce", t, torch.full((N,), 3.0))
dist.barrier()
# the world group still works beside it
t = torch.ones(5)
dist.all_reduce(t)
check("world after new_group", t, torch.full((5,), float(size)))

dist.destroy_process_group()
print(f"rank {rank} of {size}: {'PASS' if not failures else 'FAIL ' + ', '.join(failures)}")
sys.exit(1 if failures else 0)
