# SPDX-License-Identifier: Apache-2.0
"""Failures as Python exceptions, on every rank, never a hang (run under strata launch -n 2).

1. Ranks that disagree on a count: MismatchError on every rank.
2. A peer that dies mid-job: the survivor's next collective raises PeerLostError (or
   TimeoutError) well inside its timeout.
Exits 0 when both held on this rank.
"""
import os
import sys
import time

import numpy as np

import strata

comm = strata.Comm(timeout=20)
r = comm.rank
assert comm.size == 2, "run with 2 ranks"
ok = True
try:
    comm.allreduce(np.zeros(100 + 50 * r, np.float32))
    print(f"rank {r}: a mismatched allreduce did not raise", file=sys.stderr)
    ok = False
except strata.MismatchError as e:
    if e.name != "STRATA_ERR_MISMATCH":
        print(f"rank {r}: MismatchError named {e.name}", file=sys.stderr)
        ok = False
comm.destroy()

comm = strata.Comm(timeout=20)
comm.agree(True)  # both are up before rank 1 dies (decided in the store, owed to no one)
if r == 1:
    os._exit(0)  # dies without a word: no destroy, sockets and mappings torn down by the kernel
start = time.monotonic()
try:
    comm.allreduce(np.ones(1 << 16, np.float32))
    print("rank 0: an allreduce with a dead peer did not raise", file=sys.stderr)
    ok = False
except (strata.PeerLostError, strata.TimeoutError, strata.AbortedError) as e:
    took = time.monotonic() - start
    if took > 15:
        print(f"rank 0: {e.name} came after {took:.1f} s, past the 20 s timeout's intent",
              file=sys.stderr)
        ok = False
print(f"rank {r}: {'PASS' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
