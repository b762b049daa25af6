"""strata.torch: the torch.distributed backend "strata".

    import torch.distributed as dist
    import strata.torch                      # registers the backend
    dist.init_process_group("strata")        # env:// as with gloo: MASTER_ADDR/PORT, RANK, ...
    dist.all_reduce(tensor)

Every group (the default one and each new_group) joins its ranks through the store torch gives
it, so nothing but torch's own rendezvous is needed. CPU tensors only; docs/python.md lists the
supported operations and their limits.

Under `strata launch` (which sets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_ADDR and not torch's
variables) importing this module fills RANK, WORLD_SIZE and LOCAL_RANK from them and, when
MASTER_PORT is unset, has the ranks agree on MASTER_ADDR/MASTER_PORT through the launcher's
store, so `strata launch -n N -- python3 train.py` needs no more than torchrun does.
"""
import os
import socket

import torch  # noqa: F401  (torch's types must be registered before _torch loads)
import torch.distributed as dist

from . import Comm
from . import _torch

__all__ = ["BACKEND"]
BACKEND = "strata"


def _torch_env_from_strata_launch():
    env = os.environ
    if "STRATA_RANK" not in env or "STRATA_WORLD_SIZE" not in env:
        return
    for torch_name, strata_name in (("RANK", "STRATA_RANK"), ("WORLD_SIZE", "STRATA_WORLD_SIZE"),
                                    ("LOCAL_RANK", "STRATA_LOCAL_RANK")):
        if torch_name not in env and strata_name in env:
            env[torch_name] = env[strata_name]
    if "MASTER_PORT" in env or "STRATA_ADDR" not in env:
        return
    import numpy as np
    host = env["STRATA_ADDR"].rsplit(":", 1)[0].strip("[]") or "127.0.0.1"
    # Rank 0 runs on the launcher's host (strata launch starts every rank on one host): it
    # picks a free port there and tells the others through one strata broadcast.
    with Comm() as comm:
        port = np.zeros(1, np.int32)
        if comm.rank == 0:
            with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
                probe.bind((host, 0))
                port[0] = probe.getsockname()[1]
        comm.broadcast(port, root=0)
    env.setdefault("MASTER_ADDR", host)
    env["MASTER_PORT"] = str(int(port[0]))


_torch_env_from_strata_launch()
if BACKEND.upper() not in dist.Backend._plugins:
    dist.Backend.register_backend(BACKEND, _torch.create_process_group)
