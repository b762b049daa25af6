# SPDX-License-Identifier: Apache-2.0
"""One libstrata per process: strata, strata.kv and the torch backend load the same runtime.

Every extension of the package links libstrata.so.<major>, which lies beside them and is found
through $ORIGIN; a copy linked into each would give each its own memory registry, secret cache
and log level. Checks that the process maps exactly one libstrata, from the package's own
directory, and that each extension resolved strata_version to the same address. Also: a
communicator made with no launcher is a world of one. Exits 0 when all held, 1 otherwise.
"""
import os
import sys

import strata
import strata.kv  # noqa: F401
from strata import _kv, _strata

failures = []
ids = {"strata": _strata._runtime_id(), "strata.kv": _kv._runtime_id()}
try:
    import torch  # noqa: F401
    from strata import _torch
    ids["strata.torch"] = _torch._runtime_id()
except ImportError as e:
    print(f"no torch backend here ({e}): checking strata and strata.kv only")
if len(set(ids.values())) != 1:
    failures.append(f"the extensions resolved strata_version at different addresses: {ids}")
with open("/proc/self/maps") as maps:
    mapped = {line.split()[-1] for line in maps if "libstrata" in line}
package = os.path.dirname(strata.__file__)
if len(mapped) != 1 or os.path.dirname(next(iter(mapped))) != package:
    failures.append(f"libstrata mapped from {sorted(mapped)}, want one copy in {package}")

# no launcher: strata.Comm() is a world of one
env = {k: v for k, v in os.environ.items()
       if not k.startswith(("STRATA_", "OMPI_", "PMI", "SLURM_")) and
       k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
os.environ.clear()
os.environ.update(env)
buf = bytearray(b"\x01\x02\x03\x04")
with strata.Comm() as comm:
    if (comm.rank, comm.size) != (0, 1):
        failures.append(f"a Comm with no launcher is rank {comm.rank} of {comm.size}")
    comm.allreduce(buf, dtype="uint8")
if bytes(buf) != b"\x01\x02\x03\x04":
    failures.append(f"the world of one's allreduce changed the data: {bytes(buf)!r}")
print(f"runtime: {len(ids)} extensions, libstrata {sorted(mapped)}: "
      f"{'PASS' if not failures else 'FAIL ' + '; '.join(failures)}")
sys.exit(1 if failures else 0)
