# SPDX-License-Identifier: Apache-2.0
"""Bad input and failures on the "strata" backend: exceptions, never a crash or a hang (2 ranks).

1. Input strata cannot take raises on the rank that gave it, before anything is sent, and the
   group goes on working: a non-contiguous tensor, a sparse tensor, a dtype
   strata has no wire type for (uint16), a bitwise op on floats, an op complex numbers do not
   have, a list of the wrong length, all_to_all splits that do not add up.
2. Ranks that disagree on a count, or on a dtype: an exception naming STRATA_ERR_MISMATCH on
   every rank.
3. monitored_barrier with a rank that never comes: rank 0 raises naming it.
4. A peer that dies: the survivor's next operation raises well within the group's timeout.
Exits 0 when all held on this rank, 1 otherwise, 77 without torch.
"""
import datetime
import os
import sys
import time

try:
    import torch
    import torch.distributed as dist
    if os.environ.get("STRATA_TEST_IMPORT") == "1":
        import strata.torch  # noqa: F401
except ImportError as e:
    print(f"skipped: {e}")
    sys.exit(77)

TIMEOUT_S = 20
dist.init_process_group("strata", timeout=datetime.timedelta(seconds=TIMEOUT_S))
rank, size = dist.get_rank(), dist.get_world_size()
assert size == 2, "run with 2 ranks"
failures = []


def expect_error(name, call, words):
    """call() must raise an exception whose text holds every one of words."""
    try:
        call()
    except Exception as e:  # torch turns c10 errors into RuntimeError, TypeError, ...
        text = f"{type(e).__name__}: {e}"
        if not all(w in text for w in words):
            failures.append(name)
            print(f"rank {rank}: {name}: the exception does not say {words}: {text[:300]}",
                  file=sys.stderr)
        return
    failures.append(name)
    print(f"rank {rank}: {name}: no exception", file=sys.stderr)


# 1. bad input, refused locally
expect_error("non-contiguous", lambda: dist.all_reduce(torch.zeros(8, 8).t()), ["contiguous"])
expect_error("sparse tensor", lambda: dist.all_reduce(torch.zeros(8).to_sparse()), ["parse"])
expect_error("uint16 dtype", lambda: dist.all_reduce(torch.zeros(8, dtype=torch.uint16)),
             ["no strata dtype"])
expect_error("bitwise op on floats", lambda: dist.all_reduce(torch.zeros(8),
                                                             op=dist.ReduceOp.BAND),
             ["integer and bool"])
expect_error("max of complex", lambda: dist.all_reduce(torch.zeros(8, dtype=torch.complex64),
                                                       op=dist.ReduceOp.MAX), ["complex"])
expect_error("list length", lambda: dist.all_gather([torch.zeros(4)], torch.zeros(4)),
             ["one per rank"])
expect_error("splits that do not add up", lambda: dist.all_to_all_single(
    torch.zeros(4), torch.zeros(4), output_split_sizes=[1, 3], input_split_sizes=[3, 3]),
    ["adds up to"])
t = torch.ones(16)
dist.all_reduce(t)
if not torch.equal(t, torch.full((16,), 2.0)):
    failures.append("the group after refused input")

# 2. disagreements between ranks: every rank raises STRATA_ERR_MISMATCH (the group is then
# broken for good, so each case gets a group of its own)
count_group = dist.new_group(backend="strata")
expect_error("count mismatch", lambda: dist.all_reduce(torch.zeros(100 + 50 * rank),
                                                       group=count_group), ["STRATA_ERR_MISMATCH"])
dtype_group = dist.new_group(backend="strata")
dtype = torch.float32 if rank == 0 else torch.int32
expect_error("dtype mismatch", lambda: dist.all_reduce(torch.zeros(64, dtype=dtype),
                                                       group=dtype_group), ["STRATA_ERR_MISMATCH"])

# 3. monitored_barrier: rank 1 never comes, rank 0 names it (a group of its own, left broken)
late_group = dist.new_group(backend="strata")
if rank == 0:
    expect_error("monitored_barrier", lambda: dist.monitored_barrier(
        late_group, timeout=datetime.timedelta(seconds=2)), ["rank 1", "did not reach"])
dist.barrier()

# 4. a dead peer
dist.barrier()
if rank == 1:
    sys.stdout.flush()
    os._exit(0)  # no goodbye: the kernel closes its sockets and unmaps its memory
start = time.monotonic()
expect_error("dead peer", lambda: dist.all_reduce(torch.ones(1 << 16)), ["strata", "STRATA_ERR_"])
took = time.monotonic() - start
if took > TIMEOUT_S * 0.75:
    failures.append("dead peer: slow")
    print(f"rank 0: the dead peer was noticed after {took:.1f} s (timeout {TIMEOUT_S} s)",
          file=sys.stderr)
print(f"rank {rank}: dead peer noticed in {took:.2f} s; "
      f"{'PASS' if not failures else 'FAIL ' + ', '.join(failures)}", flush=True)
# The store lives in this rank (torch's TCPStore master); leave without torch's teardown, which
# would wait for the dead rank.
os._exit(1 if failures else 0)
