"""Elastic communicators from Python (run under strata launch -n 3).

1. agree(): the AND of every rank's flag.
2. revoke() from another thread ends an allreduce blocked on a late rank with RevokedError, on
   every rank; shrink() then gives a communicator of the same ranks, epoch 1.
3. A rank dies without a word: the survivors' allreduce raises, shrink() leaves it out, the
   retried allreduce gives exactly the survivors' sum, failed_ranks() names the dead rank.
4. sync_shared(): the rank behind pulls the newest revision's bytes.
Exits 0 when all held on this rank.
"""
import os
import sys
import threading
import time

import numpy as np

import strata

comm = strata.Comm(timeout=2)
r, n = comm.rank, comm.size
assert n == 3, "run with 3 ranks"
ok = True


def fail(text):
    global ok
    print(f"rank {r}: {text}", file=sys.stderr)
    ok = False


# 1. agree
if comm.agree(True) is not True:
    fail("agree(True) on every rank was not True")
if comm.agree(r != 1) is not False:
    fail("agree with one False was not False")

# 2. revoke from another thread while blocked on a late rank
x = np.full(1 << 14, r + 1, np.float32)
if r == 2:
    time.sleep(1.0)  # late but alive: the revocation reaches it while idle
if r == 0:
    threading.Timer(0.2, comm.revoke).start()
start = time.monotonic()
try:
    comm.allreduce(x)
    fail("an allreduce on a revoked communicator returned")
except strata.RevokedError:
    if r != 2 and time.monotonic() - start > 0.9:
        fail(f"RevokedError only after {time.monotonic() - start:.2f} s")
comm2 = comm.shrink()
comm.destroy()
if (comm2.size, comm2.rank, comm2.epoch) != (3, r, 1):
    fail(f"shrink after revoke: size {comm2.size} rank {comm2.rank} epoch {comm2.epoch}")

# 3. a rank dies; the survivors shrink and retry exactly
x = np.arange(1 << 16, dtype=np.float32) + 1000 * (r + 1)
comm2.allreduce(x.copy())
victim = 1
if r == victim:
    os._exit(0)  # no destroy: sockets torn down by the kernel
try:
    out = np.empty_like(x)
    for _ in range(100):
        comm2.allreduce(x, out=out)  # out of place: x stays this rank's input
    fail("allreduce never noticed the dead rank")
except (strata.PeerLostError, strata.TimeoutError, strata.AbortedError, strata.RevokedError):
    pass
comm3 = comm2.shrink()
if comm2.failed_ranks() != [victim]:
    fail(f"failed_ranks {comm2.failed_ranks()}, want [{victim}]")
comm2.destroy()
if (comm3.size, comm3.epoch) != (2, 2) or comm3.rank != (0 if r == 0 else 1):
    fail(f"shrink after a death: size {comm3.size} rank {comm3.rank} epoch {comm3.epoch}")
# shared state: rank 2 (one step behind, different bytes) pulls rank 0's
w = np.full(1000, 1.0 + (r == 2), np.float32)
m = np.arange(10, dtype=np.float64) * (1 + (r == 2))
got = comm3.sync_shared({"w": w, "m": m}, revision=5 - (r == 2))
if got["revision"] != 5 or got["pulled"] != (r == 2) or not (w == 1.0).all() or \
        not np.array_equal(m, np.arange(10, dtype=np.float64)):
    fail(f"sync_shared: {got}")
y = np.empty_like(x)
comm3.allreduce(x, out=y)
want = sum(np.arange(1 << 16, dtype=np.float32) + 1000 * (k + 1) for k in (0, 2))
if not np.array_equal(y, want):
    fail("the retried allreduce is not the survivors' sum")
comm3.destroy()
print(f"rank {r}: {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
