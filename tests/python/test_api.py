# SPDX-License-Identifier: Apache-2.0
"""Every collective of the Python API, checked on every rank (run under strata launch -n N).

Numpy arrays, bytearray and CPU torch tensors; blocking and async_op; in place and out of place;
and the errors a user meets: a wrong size, a non-contiguous buffer, an unknown op, a bitwise op
on floats, a CUDA-less device check, a destroyed communicator. Exits 0 when every check held, 1 with the failures.
"""
import sys

import numpy as np

import strata

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr)


def raises(exc, fn, what):
    try:
        fn()
    except exc:
        return
    except Exception as e:  # noqa: BLE001 - the wrong exception is a failure to report
        check(False, f"{what}: raised {type(e).__name__}: {e}")
        return
    check(False, f"{what}: did not raise {exc.__name__}")


with strata.Comm() as comm:
    r, n = comm.rank, comm.size
    check(strata.__version__.count(".") == 2, "version")
    # allreduce, every op, in place and out of place, blocking and async
    for dtype in (np.float32, np.float64, np.int32, np.int64, np.float16, np.uint8):
        x = (np.arange(7) % 5 + r + 1).astype(dtype)
        out = np.empty_like(x)
        comm.allreduce(x, out)
        want = sum((np.arange(7) % 5 + q + 1) for q in range(n)).astype(dtype)
        check(np.array_equal(out, want), f"allreduce sum {dtype.__name__}: {out} != {want}")
    for op, fn in (("max", max), ("min", min), ("prod", lambda a, b: a * b)):
        x = np.array([r + 1, 10 - r], np.float64)
        comm.allreduce(x, op=op)
        want = [1.0, 10.0]
        for q in range(n):
            vals = [q + 1, 10 - q]
            want = vals if q == 0 else [fn(a, b) for a, b in zip(want, vals)]
        check(list(x) == want, f"allreduce {op}: {x} != {want}")
    # 16-bit integers (sum wraps like the C types) and the bitwise ops
    for dtype in (np.int16, np.uint16):
        h = np.array([30000, 3 + r], dtype)
        comm.allreduce(h)
        want = np.array([30000 * n, sum(3 + q for q in range(n))]).astype(dtype)
        check(np.array_equal(h, want), f"allreduce sum {dtype.__name__}: {h} != {want}")
    for op, fn in (("band", np.bitwise_and), ("bor", np.bitwise_or), ("bxor", np.bitwise_xor)):
        mine16 = np.array([0xfff0 ^ (1 << (r % 16)), r + 1], np.uint16)
        comm.allreduce(mine16, op=op)
        want = fn.reduce([np.array([0xfff0 ^ (1 << (q % 16)), q + 1], np.uint16)
                          for q in range(n)])
        check(np.array_equal(mine16, want), f"allreduce {op} uint16: {mine16} != {want}")
    x = np.full(1 << 18, float(r), np.float32)
    req = comm.allreduce(x, op="avg", async_op=True)
    req.wait()
    check(req.is_completed() and req.status == "STRATA_OK", "async status")
    check(np.allclose(x, (n - 1) / 2), f"allreduce avg async: {x[:3]}")
    # broadcast, reduce
    b = np.arange(5, dtype=np.int64) * (7 if r == 1 % n else 0)
    comm.broadcast(b, root=1 % n)
    check(np.array_equal(b, np.arange(5) * 7), f"broadcast: {b}")
    red = np.full(3, r + 1, np.int32)
    comm.reduce(red, root=0)
    if r == 0:
        check(np.all(red == n * (n + 1) // 2), f"reduce: {red}")
    # allgather, reduce_scatter, alltoall, gather, scatter
    mine = np.full(4, r, np.float32)
    everyone = np.empty(4 * n, np.float32)
    comm.allgather(mine, everyone)
    check(np.array_equal(everyone, np.repeat(np.arange(n, dtype=np.float32), 4)), "allgather")
    src = np.arange(3 * n, dtype=np.float64)
    block = np.empty(3, np.float64)
    comm.reduce_scatter(src, block)
    check(np.array_equal(block, n * np.arange(3 * r, 3 * r + 3)), f"reduce_scatter: {block}")
    a2a_in = np.array([100 * r + j for j in range(n)], np.int64)
    a2a_out = np.empty(n, np.int64)
    comm.alltoall(a2a_in, a2a_out)
    check(list(a2a_out) == [100 * j + r for j in range(n)], f"alltoall: {a2a_out}")
    g = np.empty(2 * n, np.int32) if r == 0 else None
    comm.gather(np.array([r, -r], np.int32), g, root=0)
    if r == 0:
        check(list(g) == [v for q in range(n) for v in (q, -q)], f"gather: {g}")
    s_in = np.arange(2 * n, dtype=np.float32) if r == n - 1 else None
    s_out = np.empty(2, np.float32)
    comm.scatter(s_in, s_out, root=n - 1)
    check(list(s_out) == [2 * r, 2 * r + 1], f"scatter: {s_out}")
    # bytearray and memoryview
    ba = bytearray([r + 1] * 16)
    comm.allreduce(ba)
    check(all(v == n * (n + 1) // 2 for v in ba), "bytearray allreduce")
    # send / recv around a ring, async send so no pair blocks
    token = np.array([r * 11], np.int64)
    got = np.empty(1, np.int64)
    req = comm.send(token, (r + 1) % n, async_op=True)
    comm.recv(got, (r - 1) % n)
    req.wait()
    check(got[0] == ((r - 1) % n) * 11, f"ring send/recv: {got}")
    comm.barrier()
    # torch tensors
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        for tdtype in (torch.float32, torch.bfloat16, torch.float16, torch.int64):
            t = torch.full((1000,), r + 1, dtype=tdtype)
            comm.allreduce(t)
            check(bool((t == n * (n + 1) // 2).all()), f"torch allreduce {tdtype}")
        t = torch.arange(6, dtype=torch.float32) + r
        outs = torch.empty(6 * n)
        req = comm.allgather(t, outs, async_op=True)
        del t  # the request keeps the tensor alive
        req.wait()
        check(bool((outs.view(n, 6) == torch.arange(6) + torch.arange(n)[:, None]).all()),
              "torch allgather async")
        raises(ValueError, lambda: comm.allreduce(torch.zeros(4, 4).t()), "torch non-contiguous")
    # split: parity groups, order reversed by key; None for a rank that stays out
    half = comm.split(r % 2, key=-r)
    members = [q for q in range(n) if q % 2 == r % 2]
    check(half.size == len(members) and half.rank == len(members) - 1 - members.index(r),
          f"split rank {half.rank} of {half.size}")
    v = np.array([r], np.int64)
    half.allreduce(v)
    check(v[0] == sum(members), f"split allreduce {v}")
    half.destroy()
    check(comm.split(None if r == 0 else 1) is None or r != 0, "undefined color gets None")
    # errors
    raises(ValueError, lambda: comm.allgather(mine, np.empty(1, np.float32)), "short output")
    raises(ValueError, lambda: comm.allreduce(np.zeros((4, 4), np.float32)[:, 1]),
           "non-contiguous numpy")
    raises(ValueError, lambda: comm.allreduce(mine, op="median"), "unknown op")
    raises(strata.InvalidArgError, lambda: comm.allreduce(np.zeros(2, np.float32), op="band"),
           "bitwise op on float32")
    raises(TypeError, lambda: comm.allreduce(np.zeros(4, np.complex64)),
           "complex64 has no dtype")
    raises(TypeError, lambda: comm.allreduce(b"read-only"), "read-only output")
    raises(TypeError, lambda: comm.allreduce(np.zeros(3), np.zeros(3, np.float32)),
           "mismatched dtypes")
    check(comm.stats()["messages_sent"] > 0 or n == 1, "stats")
comm_closed = comm
raises(ValueError, lambda: comm_closed.allreduce(np.zeros(1, np.float32)), "destroyed comm")
print(f"rank {r} of {n}: {'FAIL' if failures else 'PASS'} ({len(failures)} failures)")
sys.exit(1 if failures else 0)
