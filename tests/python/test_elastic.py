# SPDX-License-Identifier: Apache-2.0
"""Elastic communicators from Python (run under strata launch -n 3).

1. agree(): the AND of every rank's flag.
2. revoke() from another thread ends an allreduce blocked on a late rank with RevokedError, on
   every rank; shrink() then gives a communicator of the same ranks, epoch 1.
3. A rank dies without a word: the survivors' allreduce raises, shrink() leaves it out, the
   retried allreduce gives exactly the survivors' sum, failed_ranks() names the dead rank.
4. sync_shared(): the rank behind pulls the newest revision's bytes.
5. A worker started later with STRATA_JOIN=1 joins a DiLoCo run: grow() admits it, DiLoCo.sync()
   gives it the members' outer state, and all go on with the same parameters.
Exits 0 when all held on this rank.
"""
import os
import sys
import threading
import time

import numpy as np

import strata

if "--joiner" in sys.argv:  # started by rank 0 in part 5, with STRATA_JOIN=1
    comm = strata.Comm(timeout=2)  # returns at the members' grow
    w = np.zeros(4096, np.float32)
    d = strata.DiLoCo(None, [w], sync_every=2)
    pulled = d.sync(comm)
    lo, hi = w.copy(), w.copy()
    comm.allreduce(lo, op="min")
    comm.allreduce(hi, op="max")
    me, epoch = comm.rank, comm.epoch
    good = pulled and me == 2 and epoch == 3 and np.array_equal(lo, hi)
    for _ in range(2):
        w -= 0.01
        d.step()
    d.close()
    comm.destroy()
    print(f"joiner: {'ok' if good else 'FAILED'} (pulled {pulled}, rank {me}, epoch {epoch})")
    sys.exit(0 if good else 1)

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
# the victim leaves only once every rank has finished that allreduce: a rank killed right after
# its own part returned can still owe a slower rank the bytes of the last step, and that rank
# would rightly fail it (the agreement's decision comes from the store, not from the victim)
comm2.agree(True)
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
# 5. a worker joins a DiLoCo run: started later with STRATA_JOIN=1, admitted by grow(), given the
#    members' outer state by DiLoCo.sync()
w = np.linspace(0, 1, 4096, dtype=np.float32) + comm3.rank
d = strata.DiLoCo(comm3, [w], sync_every=2)
for _ in range(4):
    w -= 0.01 * (comm3.rank + 1)
    d.step()
joiner = None
if comm3.rank == 0:
    import subprocess
    env = dict(os.environ, STRATA_JOIN="1")
    joiner = subprocess.Popen([sys.executable, __file__, "--joiner"], env=env)
comm4 = None
deadline = time.monotonic() + 60
while comm4 is None and time.monotonic() < deadline:
    comm4 = comm3.grow()
    if comm4 is None:
        time.sleep(0.05)
if comm4 is None or comm4.size != 3:
    fail("the joiner was never admitted")
else:
    if d.sync(comm4):
        fail("a member pulled the DiLoCo state")
    lo, hi = w.copy(), w.copy()
    comm4.allreduce(lo, op="min")
    comm4.allreduce(hi, op="max")
    if not np.array_equal(lo, hi):
        fail("the workers' parameters differ after the joiner's sync")
    for _ in range(2):
        w -= 0.01
        d.step()
    d.close()
    comm4.destroy()
if joiner is not None and joiner.wait(timeout=60) != 0:
    fail("the joiner failed")
comm3.destroy()
print(f"rank {r}: {'ok' if ok else 'FAILED'}")
sys.exit(0 if ok else 1)
