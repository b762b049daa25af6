# SPDX-License-Identifier: Apache-2.0
"""Every c10d operation of the torch.distributed backend "strata" on every dtype (any rank count
>= 2), checked against exact values and, where gloo has the operation, against gloo's result on
the same inputs.

Runs under `strata launch -n N` (which sets torch's env:// variables) and under torchrun. The
default group is "strata" and nothing imports strata: with the pip-installed package torch
loads the backend through its "torch.backends" entry point; from a build tree (PYTHONPATH)
STRATA_TEST_IMPORT=1 imports strata.torch first. A gloo group over the same ranks is the
reference. Exits 0 when every check held on this rank, 1 otherwise, 77 when torch is missing.
"""
import datetime
import os
import sys

try:
    import torch
    import torch.distributed as dist
    if os.environ.get("STRATA_TEST_IMPORT") == "1":
        import strata.torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

R = dist.ReduceOp
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64,
          torch.complex128]
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 1e-2, torch.float32: 1e-6,
             torch.float64: 1e-12, torch.complex64: 1e-6, torch.complex128: 1e-12}
N = 37  # elements per rank: not a multiple of anything the algorithms chunk by
PREMUL = 2.0

# STRATA_TEST_DEVICE=cuda (scripts/gpu-check.sh): every tensor on the GPU, and the group bound
# to it, which split_group needs
device_id = None
if os.environ.get("STRATA_TEST_DEVICE", "cpu") == "cuda":
    device_id = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0"))
                             % torch.cuda.device_count())
    torch.cuda.set_device(device_id)
    torch.set_default_device(device_id)
dist.init_process_group("strata", timeout=datetime.timedelta(seconds=60), device_id=device_id)
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
failures = []
checked = {"exact": 0, "gloo": 0, "refused": 0}


def report(name, got, want):
    failures.append(name)
    print(f"rank {rank}: {name}: got {got.flatten()[:6].tolist()}, "
          f"want {want.flatten()[:6].tolist()}", file=sys.stderr)


def same(got, want, dtype):
    got, want = got.cpu(), want.cpu()
    if got.shape != want.shape:
        return False
    if dtype == torch.bool or not (dtype.is_floating_point or dtype.is_complex):
        return torch.equal(got.to(torch.int64), want.to(torch.int64))
    tol = TOLERANCE[dtype]
    return torch.allclose(got.to(torch.complex128), want.to(torch.complex128), rtol=tol, atol=tol)


def check(name, got, want, dtype=None, kind="exact"):
    dtype = dtype or got.dtype
    checked[kind] += 1
    if not same(got, want, dtype):
        report(f"{name} ({kind})", got, want)


def values(r, dtype, count=N, small=False):
    """Exact in every dtype: small numbers that depend on the rank and the index (1 or 2 for
    products; alternating truth for bool; a nonzero imaginary part for complex)."""
    idx = torch.arange(count, dtype=torch.int64)
    if dtype == torch.bool:
        return (idx + r) % 3 == 0
    v = idx % 2 + 1 if small else (idx * 7 + r * 3) % 11 + 1
    if dtype.is_complex:
        return torch.complex(v.double(), (v % 3).double()).to(dtype)
    return v.to(dtype)


def exact_reduce(op, dtype, inputs):
    """The reduction of `inputs` (one tensor per rank) as the backend defines it."""
    if dtype == torch.bool:
        stack = torch.stack([t.to(torch.int64) for t in inputs])
        if op in (R.SUM, R.MAX, R.BOR):
            out = stack.max(0).values
        elif op in (R.PRODUCT, R.MIN, R.BAND):
            out = stack.min(0).values
        else:  # BXOR
            out = stack.sum(0) % 2
        return out.to(torch.bool)
    wide = torch.complex128 if dtype.is_complex else \
        torch.float64 if dtype.is_floating_point else torch.int64
    stack = torch.stack([t.to(wide) for t in inputs])
    if op == R.SUM:
        out = stack.sum(0)
    elif op == R.PREMUL_SUM:
        out = (stack * PREMUL).sum(0)
    elif op == R.AVG:
        out = stack.sum(0) / size if dtype.is_floating_point or dtype.is_complex \
            else stack.sum(0) // size
    elif op == R.PRODUCT:
        out = stack.prod(0)
    elif op == R.MIN:
        out = stack.min(0).values
    elif op == R.MAX:
        out = stack.max(0).values
    else:
        out = stack[0].clone()
        for t in stack[1:]:
            out = out & t if op == R.BAND else out | t if op == R.BOR else out ^ t
    return out.to(dtype)


def defined(op, dtype):
    """Whether strata's backend takes (op, dtype); the rest must raise."""
    if dtype.is_complex:
        return op in (R.SUM, R.AVG, R.PREMUL_SUM)
    if dtype == torch.bool:
        return op not in (R.AVG, R.PREMUL_SUM)
    if dtype.is_floating_point:
        return op not in (R.BAND, R.BOR, R.BXOR)
    return True


def reduce_op(op):
    return dist._make_nccl_premul_sum(PREMUL) if op == R.PREMUL_SUM else op


def with_gloo(name, dtype, run, got):
    """Run the same operation on the gloo group; compare where gloo has it."""
    try:
        reference = run(gloo)
    except (RuntimeError, ValueError, TypeError, NotImplementedError):
        return
    check(name, got, reference, dtype, kind="gloo")


def expect_refusal(name, run):
    try:
        run()
    except (RuntimeError, ValueError, TypeError):
        checked["refused"] += 1
        return
    failures.append(f"{name}: accepted, should raise")


OPS = [R.SUM, R.AVG, R.PRODUCT, R.MIN, R.MAX, R.BAND, R.BOR, R.BXOR, R.PREMUL_SUM]


def all_reduce_on(group, op, dtype):
    t = values(rank, dtype, small=op == R.PRODUCT)
    dist.all_reduce(t, op=reduce_op(op), group=group)
    return t


for dtype in DTYPES:
    for op in OPS:
        name = f"all_reduce {op} {dtype}"
        inputs = [values(r, dtype, small=op == R.PRODUCT) for r in range(size)]
        if not defined(op, dtype):
            expect_refusal(name, lambda: all_reduce_on(None, op, dtype))
            continue
        got = all_reduce_on(None, op, dtype)
        check(name, got, exact_reduce(op, dtype, inputs))
        if op not in (R.AVG, R.PREMUL_SUM):
            with_gloo(name, dtype, lambda g: all_reduce_on(g, op, dtype), got)

    # allreduce_coalesced: tensors of one dtype, reduced as one
    pg = dist.distributed_c10d._get_default_group()
    coalesced = [values(rank, dtype, 5), values(rank, dtype, 9)]
    pg.allreduce_coalesced(coalesced).wait()
    for i, count in enumerate((5, 9)):
        check(f"allreduce_coalesced [{i}] {dtype}", coalesced[i],
              exact_reduce(R.SUM, dtype, [values(r, dtype, count) for r in range(size)]))

    for root in (0, size - 1):
        t = values(rank, dtype) if rank == root else torch.zeros(N, dtype=dtype)
        dist.broadcast(t, src=root)
        check(f"broadcast root {root} {dtype}", t, values(root, dtype))

        red_op = R.SUM if dtype != torch.bool else R.MAX
        t = values(rank, dtype)
        dist.reduce(t, dst=root, op=red_op)
        if rank == root:
            check(f"reduce root {root} {dtype}", t,
                  exact_reduce(red_op, dtype, [values(r, dtype) for r in range(size)]))

        inp = values(rank, dtype)
        outs = [torch.empty(N, dtype=dtype) for _ in range(size)] if rank == root else None
        dist.gather(inp, gather_list=outs, dst=root)
        if rank == root:
            check(f"gather root {root} {dtype}", torch.cat(outs),
                  torch.cat([values(r, dtype) for r in range(size)]))
        out = torch.empty(N, dtype=dtype)
        ins = [values(r + 5, dtype) for r in range(size)] if rank == root else None
        dist.scatter(out, scatter_list=ins, src=root)
        check(f"scatter root {root} {dtype}", out, values(rank + 5, dtype))

    everyone = torch.cat([values(r, dtype) for r in range(size)])
    outs = [torch.empty(N, dtype=dtype) for _ in range(size)]
    dist.all_gather(outs, values(rank, dtype))
    check(f"all_gather {dtype}", torch.cat(outs), everyone)
    out = torch.empty(size * N, dtype=dtype)
    dist.all_gather_into_tensor(out, values(rank, dtype))
    check(f"all_gather_into_tensor {dtype}", out, everyone)
    outs = [torch.empty(size * N, dtype=dtype), torch.empty(size * 4, dtype=dtype)]
    pg.allgather_into_tensor_coalesced(outs, [values(rank, dtype), values(rank, dtype, 4)]).wait()
    check(f"allgather_into_tensor_coalesced {dtype}", outs[1],
          torch.cat([values(r, dtype, 4) for r in range(size)]))
    check(f"allgather_into_tensor_coalesced [0] {dtype}", outs[0], everyone)

    # reduce_scatter: rank r's block b is values(r + b); rank b receives the reduction
    rs_op = R.SUM if dtype != torch.bool else R.BOR
    blocks = [values(rank + b, dtype) for b in range(size)]
    want = exact_reduce(rs_op, dtype, [values(r + rank, dtype) for r in range(size)])
    out = torch.empty(N, dtype=dtype)
    dist.reduce_scatter(out, blocks, op=rs_op)
    check(f"reduce_scatter {dtype}", out, want)
    out = torch.empty(N, dtype=dtype)
    dist.reduce_scatter_tensor(out, torch.cat(blocks), op=rs_op)
    check(f"reduce_scatter_tensor {dtype}", out, want)
    if dtype in (torch.float32, torch.int32):
        g_out = torch.empty(N, dtype=dtype)
        with_gloo(f"reduce_scatter_tensor {dtype}", dtype,
                  lambda g: (dist.reduce_scatter_tensor(g_out, torch.cat(blocks), group=g),
                             g_out)[1], out)
    outs = [torch.empty(N, dtype=dtype), torch.empty(3, dtype=dtype)]
    rs_opts = dist.ReduceScatterOptions()
    rs_opts.reduceOp = rs_op
    pg.reduce_scatter_tensor_coalesced(
        outs, [torch.cat(blocks), torch.cat([values(rank + b, dtype, 3) for b in range(size)])],
        rs_opts).wait()
    check(f"reduce_scatter_tensor_coalesced {dtype}", outs[0], want)
    check(f"reduce_scatter_tensor_coalesced [1] {dtype}", outs[1],
          exact_reduce(rs_op, dtype, [values(r + rank, dtype, 3) for r in range(size)]))

    # all_to_all: block j of rank i's input is values(10 * i + j); it lands as block i on rank j
    inp = torch.cat([values(10 * rank + j, dtype) for j in range(size)])
    out = torch.empty(size * N, dtype=dtype)
    dist.all_to_all_single(out, inp)
    check(f"all_to_all_single {dtype}", out,
          torch.cat([values(10 * i + rank, dtype) for i in range(size)]))
    # uneven: rank i sends i + j + 1 elements to rank j
    sends = [values(10 * rank + j, dtype, rank + j + 1) for j in range(size)]
    recv_sizes = [i + rank + 1 for i in range(size)]
    out = torch.empty(sum(recv_sizes), dtype=dtype)
    dist.all_to_all_single(out, torch.cat(sends), output_split_sizes=recv_sizes,
                           input_split_sizes=[t.numel() for t in sends])
    want = torch.cat([values(10 * i + rank, dtype, i + rank + 1) for i in range(size)])
    check(f"all_to_all_single uneven {dtype}", out, want)
    if dtype == torch.float32:
        g_out = torch.empty(sum(recv_sizes), dtype=dtype)
        with_gloo(f"all_to_all_single uneven {dtype}", dtype,
                  lambda g: (dist.all_to_all_single(
                      g_out, torch.cat(sends), output_split_sizes=recv_sizes,
                      input_split_sizes=[t.numel() for t in sends], group=g), g_out)[1], out)
    outs = [torch.empty(i + rank + 1, dtype=dtype) for i in range(size)]
    dist.all_to_all(outs, sends)
    check(f"all_to_all uneven {dtype}", torch.cat(outs), want)

    # point to point: a ring, async, and batch_isend_irecv both ways
    got = torch.empty(N, dtype=dtype)
    works = [dist.isend(values(rank, dtype), dst=(rank + 1) % size),
             dist.irecv(got, src=(rank - 1) % size)]
    for w in works:
        w.wait()
    check(f"isend/irecv ring {dtype}", got, values((rank - 1) % size, dtype))
    left, right = (rank - 1) % size, (rank + 1) % size
    from_left, from_right = torch.empty(N, dtype=dtype), torch.empty(N, dtype=dtype)
    ops = [dist.P2POp(dist.isend, values(rank, dtype), right),
           dist.P2POp(dist.isend, values(rank + 1, dtype), left),
           dist.P2POp(dist.irecv, from_left, left), dist.P2POp(dist.irecv, from_right, right)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    check(f"batch_isend_irecv left {dtype}", from_left, values(left, dtype))
    check(f"batch_isend_irecv right {dtype}", from_right, values(right + 1, dtype))
    # irecv() without src (recv_anysource) in the ring: only the left neighbour sends here
    got = torch.empty(N, dtype=dtype)
    works = [dist.isend(values(rank + 2, dtype), dst=right), dist.irecv(got)]
    for w in works:
        w.wait()
    check(f"irecv from any source {dtype}", got, values(left + 2, dtype))
    if works[1]._source_rank() != left:
        failures.append(f"irecv from any source {dtype}: source {works[1]._source_rank()}")

# blocking send/recv, 0 -> 1
if rank == 0:
    dist.send(values(0, torch.float32), dst=1)
elif rank == 1:
    got = torch.empty(N)
    dist.recv(got, src=0)
    check("send/recv blocking", got, values(0, torch.float32))

# recv from any source. Rank 0 lets the others send one at a time, last rank first, its receive
# posted before it says who: each dist.recv() returns the sender's rank. (After a barrier: a
# token sent while a rank's ring receive from any source still waited would be taken by it.)
dist.barrier()
order = [size - 1] + list(range(1, size - 1))
token = torch.ones(1, dtype=torch.uint8)
if rank == 0:
    for sender in order:
        got = torch.empty(N, dtype=torch.int64)
        work = dist.irecv(got)
        dist.send(token, dst=sender)
        work.wait()
        check(f"recv from any source, rank {sender} let go", got, values(sender, torch.int64))
        if work._source_rank() != sender:
            failures.append(f"irecv() let rank {sender} go, named {work._source_rank()}")
    dist.barrier()
    # everyone at once, blocking dist.recv(t): each sender once, named by what it sent
    senders = []
    for _ in range(size - 1):
        got = torch.empty(N, dtype=torch.int64)
        src = dist.recv(got)
        senders.append(src)
        check(f"recv() from any source: from {src}", got, values(100 + src, torch.int64))
    if sorted(senders) != list(range(1, size)):
        failures.append(f"recv() from any source: senders {senders}")
else:
    dist.recv(token, src=0)
    dist.send(values(rank, torch.int64), dst=0)
    dist.barrier()  # the next message only once rank 0 has every first one
    dist.send(values(100 + rank, torch.int64), dst=0)

# mixed with receives from rank 1, in both orders: a message goes to the receive posted first
# (MPI's non-overtaking rule), the any-source one naming rank 1
dist.barrier()
if rank == 0:
    for any_first in (True, False):
        a, b = torch.empty(N), torch.empty(N)
        if any_first:
            works = [dist.irecv(a), dist.irecv(b, src=1)]
        else:
            works = [dist.irecv(a, src=1), dist.irecv(b)]
        for w in works:
            w.wait()
        name = "any-source then from 1" if any_first else "from 1 then any-source"
        check(f"{name}: first", a, values(1, torch.float32))
        check(f"{name}: second", b, values(2, torch.float32))
        source = works[0 if any_first else 1]._source_rank()
        if source != 1:
            failures.append(f"{name}: the any-source receive named {source}")
elif rank == 1:
    for _ in range(2):
        dist.send(values(1, torch.float32), dst=0)
        dist.send(values(2, torch.float32), dst=0)

# 2-D tensors: all_gather into size x N, all_gather list of 3 x 4
out = torch.empty(size, N, dtype=torch.int32)
dist.all_gather_into_tensor(out, values(rank, torch.int32))
check("all_gather_into_tensor 2-D", out, torch.stack([values(r, torch.int32) for r in range(size)]))
outs = [torch.empty(3, 4) for _ in range(size)]
dist.all_gather(outs, values(rank, torch.float32, 12).view(3, 4))
for r in range(size):
    check(f"all_gather 2-D [{r}]", outs[r], values(r, torch.float32, 12).view(3, 4))

# all_gather_coalesced (list of lists)
pg = dist.distributed_c10d._get_default_group()
outs = [[torch.empty(4) for _ in range(size)], [torch.empty(2, dtype=torch.int64)
                                                for _ in range(size)]]
pg.allgather_coalesced(outs, [values(rank, torch.float32, 4), values(rank, torch.int64, 2)]).wait()
check("allgather_coalesced [1]", torch.cat(outs[1]),
      torch.cat([values(r, torch.int64, 2) for r in range(size)]))

dist.barrier()
dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
dist.monitored_barrier(timeout=datetime.timedelta(seconds=30), wait_all_ranks=True)

# async work: is_completed after wait; the future carries the output
t = values(rank, torch.float32)
work = dist.all_reduce(t, async_op=True)
future = work.get_future()
work.wait()
if not work.is_completed():
    failures.append("async work not completed after wait")
want = exact_reduce(R.SUM, torch.float32, [values(r, torch.float32) for r in range(size)])
check("async all_reduce", t, want)
check("async all_reduce future", future.wait()[0], want)

# several operations in flight at once complete each with its own result
pending = [(torch.full((1000,), float(rank + k)), k) for k in range(8)]
works = [dist.all_reduce(t, async_op=True) for t, _ in pending]
for w in works:
    w.wait()
for t, k in pending:
    check(f"in flight {k}", t, torch.full((1000,), float(sum(r + k for r in range(size)))))

# object collectives
objects = [None] * size
dist.all_gather_object(objects, {"rank": rank, "name": f"r{rank}"})
if objects != [{"rank": r, "name": f"r{r}"} for r in range(size)]:
    failures.append(f"all_gather_object: {objects}")
box = [("payload", 42)] if rank == 0 else [None]
dist.broadcast_object_list(box, src=0)
if box != [("payload", 42)]:
    failures.append(f"broadcast_object_list: {box}")
mine = [None]
dist.scatter_object_list(mine, [f"for {r}" for r in range(size)] if rank == 0 else None, src=0)
if mine != [f"for {rank}"]:
    failures.append(f"scatter_object_list: {mine}")

# new_group and split_group make strata communicators of their own
pair = dist.new_group([0, 1], backend="strata")
if rank < 2:
    t = torch.full((N,), float(rank + 1))
    dist.all_reduce(t, group=pair)
    check("new_group all_reduce", t, torch.full((N,), 3.0))
# torch's split_group wants a default group bound to an accelerator (init_process_group's
# device_id): on a host without one it refuses before any backend is asked, gloo's included.
if dist.distributed_c10d._get_default_group().bound_device_id is not None:
    halves = [list(range(0, size, 2)), list(range(1, size, 2))]
    split = dist.split_group(split_ranks=halves)
    mine = halves[rank % 2]
    t = torch.full((N,), float(rank))
    dist.all_reduce(t, group=split)
    check("split_group all_reduce", t, torch.full((N,), float(sum(mine))))
    if dist.get_backend(split) != "strata":
        failures.append(f"split_group backend: {dist.get_backend(split)}")
t = torch.ones(5)
dist.all_reduce(t)
check("world after new groups", t, torch.full((5,), float(size)))

# strata.torch.stats(): every strata group of the process together, a new one's included, and
# its bytes still counted once the group is destroyed. A 2-rank allreduce sends the other rank
# what it lacks, the buffer's 4,000 bytes, whatever its algorithm (halves both ways, or whole).
import strata.torch  # noqa: E402
if size == 2:
    before = strata.torch.stats()
    solo = dist.new_group([0, 1], backend="strata")
    t = torch.ones(1000)
    dist.all_reduce(t, group=solo)
    dist.destroy_process_group(solo)
    after = strata.torch.stats()
    grew = after["data_bytes_sent"] - before["data_bytes_sent"]
    if grew != 1000 * 4 or after["messages_sent"] <= before["messages_sent"] or \
            after["groups"] < 1:
        failures.append(f"strata.torch.stats: {before} then {after} (want +4000 bytes)")

dist.destroy_process_group()
print(f"rank {rank} of {size}: {checked['exact']} exact, {checked['gloo']} against gloo, "
      f"{checked['refused']} refused as they must: "
      f"{'PASS' if not failures else 'FAIL ' + ', '.join(failures)}")
sys.exit(1 if failures else 0)
