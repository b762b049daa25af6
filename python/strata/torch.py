# SPDX-License-Identifier: Apache-2.0
"""strata.torch: the torch.distributed backend "strata".

    import torch.distributed as dist
    import strata.torch                      # registers the backend
    dist.init_process_group("strata")        # env:// as with gloo: MASTER_ADDR/PORT, RANK, ...
    dist.all_reduce(tensor)

Every group (the default one and each new_group) joins its ranks through the store torch gives
it, so nothing but torch's own rendezvous is needed. CPU tensors only; docs/python.md lists the
supported operations and their limits.

strata.torch.DiLoCo(model, inner_optimizer, sync_every=H, ...) trains with DiLoCo over strata:
each worker runs its own inner optimizer and the workers average their progress every H inner
steps (an outer step), see the class.

Under `strata launch` (which sets STRATA_RANK, STRATA_WORLD_SIZE, STRATA_ADDR and not torch's
variables) importing this module fills RANK, WORLD_SIZE and LOCAL_RANK from them and, when
MASTER_PORT is unset, has the ranks agree on MASTER_ADDR/MASTER_PORT through the launcher's
store, so `strata launch -n N -- python3 train.py` needs no more than torchrun does.
"""
import itertools
import os
import secrets
import socket

import torch  # noqa: F401  (torch's types must be registered before _torch loads)
import torch.distributed as dist

from . import Comm
from . import DiLoCo as _DiLoCoState
from . import _torch

__all__ = ["BACKEND", "DiLoCo"]
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


_diloco_comms = itertools.count()  # numbers the communicators made for DiLoCo, alike on all ranks


def _diloco_comm():
    """A communicator of its own for a DiLoCo with comm=None.

    With a default process group (of any backend), its ranks join through that group's store,
    as the "strata" backend's groups do, under a job id rank 0 draws: nothing but torch's
    rendezvous is needed and the process group's own calls are untouched. Without one, the
    communicator comes from the environment (strata launch sets STRATA_RANK, STRATA_ADDR...).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return Comm()
    store = dist.PrefixStore(f"strata_diloco/{next(_diloco_comms)}",
                             dist.distributed_c10d._get_default_store())
    rank, size = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        job_id = f"diloco-{secrets.token_hex(8)}"
        store.set("job_id", job_id)
    else:
        job_id = store.get("job_id").decode()
    return Comm(store=store, rank=rank, world_size=size, job_id=job_id)


class DiLoCo:
    """DiLoCo (arXiv 2311.08105) and Streaming DiLoCo (arXiv 2501.18512) for a torch model.

        opt = torch.optim.AdamW(model.parameters(), lr=4e-4)
        diloco = strata.torch.DiLoCo(model, opt, sync_every=100)
        for x, y in data:
            diloco.zero_grad()
            loss_fn(model(x), y).backward()
            diloco.step()          # the inner step; every sync_every steps also the outer one

    Each worker trains its own copy of the model with `inner_optimizer`. Every `sync_every`
    inner steps (H), strata averages the outer gradient (global - local parameters) over the
    ranks, applies SGD with `outer_lr`, `outer_momentum` and Nesterov momentum (`nesterov`) to
    the global parameters it keeps (f32), and sets the model's parameters to them. With
    `fragments` P > 1 the parameters are exchanged in P pieces spread over the H steps, each
    applied `delay` inner steps after it started (its exchange overlapping training) and merged
    as alpha*local + (1-alpha)*global. `compress` is the outer gradient's wire encoding ("none",
    "bf16", "f16", "int8", "fp8", "int4"; None: the communicator's).

    The model's parameters must be contiguous CPU float32 or bfloat16 tensors, stay the same
    tensors (strata updates their memory in place: never rebind `.data`) and have the same
    shapes on every rank. Creating it is collective: every rank starts from rank 0's parameters.

    comm: a strata.Comm; None makes one (see _diloco_comm: through the default process group's
    store when there is one, else from the environment), owned and closed by this object.
    """

    def __init__(self, model, inner_optimizer, sync_every=100, outer_lr=0.7, outer_momentum=0.9,
                 nesterov=True, fragments=1, delay=0, alpha=0.5, compress="none", comm=None):
        params = list(model.parameters() if hasattr(model, "parameters") else model)
        if not params:
            raise ValueError("the model has no parameters")
        seen = set()
        for i, p in enumerate(params):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"parameter {i} is a {type(p).__name__}, not a torch tensor")
            if p.device.type != "cpu":
                raise TypeError(f"parameter {i} is on {p.device}; strata's DiLoCo takes CPU "
                                "tensors only")
            if p.layout != torch.strided:
                raise TypeError(f"parameter {i} is a {p.layout} tensor; DiLoCo takes dense ones")
            if p.dtype not in (torch.float32, torch.bfloat16):
                raise TypeError(f"parameter {i} is {p.dtype}; strata's DiLoCo takes "
                                "torch.float32 or torch.bfloat16 parameters")
            if not p.is_contiguous():
                raise ValueError(f"parameter {i} (shape {tuple(p.shape)}) is not contiguous; "
                                 "strata's DiLoCo updates parameters in place")
            if p.data_ptr() in seen:
                raise ValueError(f"parameter {i} shares its memory with another parameter")
            seen.add(p.data_ptr())
        self.inner_optimizer = inner_optimizer
        self._params = params
        self.last_applied = 0  # fragments the last step() applied
        self._owns_comm = comm is None
        self.comm = _diloco_comm() if comm is None else comm
        try:
            with torch.no_grad():
                self._state = _DiLoCoState(
                    self.comm, [p.detach() for p in params], sync_every=sync_every,
                    outer_lr=outer_lr, outer_momentum=outer_momentum, nesterov=nesterov,
                    fragments=fragments, delay=delay, alpha=alpha, compress=compress)
        except BaseException:
            if self._owns_comm:
                self.comm.destroy()
            raise

    # ---- training ----
    def step(self, closure=None):
        """The inner optimizer's step, then DiLoCo's: the outer exchanges that are due start and
        those whose delay has passed are applied to the parameters. Returns the closure's loss
        (as torch optimizers do)."""
        loss = self.inner_optimizer.step(closure) if closure is not None \
            else self.inner_optimizer.step()
        self.last_applied = self._state.step()
        return loss

    def zero_grad(self, set_to_none=False):
        """The inner optimizer's zero_grad."""
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def inner_steps(self):
        """Inner steps counted so far."""
        return self._state.inner_steps

    @property
    def outer_steps(self):
        """Outer steps applied so far, over all fragments."""
        return self._state.outer_steps

    @property
    def fragments(self):
        return self._state.fragments

    # ---- checkpoints ----
    def state_dict(self):
        """The inner optimizer's state, strata's outer state (global parameters, momentum,
        counters) as bytes, and the counters. Not the model: save model.state_dict() too."""
        return {"inner_optimizer": self.inner_optimizer.state_dict(),
                "diloco": self._state.save(),
                "inner_steps": self._state.inner_steps,
                "outer_steps": self._state.outer_steps}

    def load_state_dict(self, state_dict):
        """Restores what state_dict() returned, into a DiLoCo over the same parameters and
        options (load the model's state_dict as well)."""
        self._state.load(state_dict["diloco"])
        self.inner_optimizer.load_state_dict(state_dict["inner_optimizer"])

    # ---- the communicator ----
    def set_comm(self, comm):
        """Move to another communicator of the same workers or of fewer (after a shrink)."""
        self._state.set_comm(comm)
        if self._owns_comm:
            self._owns_comm = False
            old, self.comm = self.comm, comm
            old.destroy()
        else:
            self.comm = comm

    def sync(self, comm):
        """Collective over `comm` (after comm.grow()): every rank takes the members' outer state;
        returns True on a rank that pulled it (a joiner), whose parameters restart from
        theta_global."""
        pulled = self._state.sync(comm)
        if self._owns_comm and comm is not self.comm:
            self._owns_comm = False
            old, self.comm = self.comm, comm
            old.destroy()
        else:
            self.comm = comm
        return pulled

    def close(self):
        """Wait for exchanges in flight and free strata's state (and the communicator made for
        it). Idempotent."""
        self._state.close()
        if self._owns_comm:
            self._owns_comm = False
            self.comm.destroy()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return (f"<strata.torch.DiLoCo {len(self._params)} parameters, {self.inner_steps} inner "
                f"and {self.outer_steps} outer steps>")
