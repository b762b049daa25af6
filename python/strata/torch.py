# SPDX-License-Identifier: Apache-2.0
"""strata.torch: the torch.distributed backend "strata", and DiLoCo for torch models.

    import torch.distributed as dist
    dist.init_process_group("strata")        # env:// as with gloo: MASTER_ADDR/PORT, RANK, ...
    dist.all_reduce(tensor)

With the package installed by pip, torch (>= 2.5) registers the backend itself at `import torch`
(the "torch.backends" entry point); with older torch or a build-tree package, `import
strata.torch` registers it. It serves the "cpu" and "cuda" devices: tensors on a GPU (or any
other device) are staged through pinned host memory. Every group (the default one, each
new_group and split_group) joins its ranks through the store torch gives it, so nothing but
torch's own rendezvous is needed. `strata launch` sets torch's variables (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR, MASTER_PORT) as torchrun does. docs/python.md lists every operation
and dtype.

strata.torch.DiLoCo(model, inner_optimizer, sync_every=H, ...) trains with DiLoCo over strata:
each worker runs its own inner optimizer and the workers average their progress every H inner
steps (an outer step), see the class.
"""
from __future__ import annotations

import functools
import itertools
import secrets
import warnings
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, Optional, Union, cast

if TYPE_CHECKING:
    from typing_extensions import Literal, Self


def _autoload() -> None:
    """The "torch.backends" entry point torch calls at import: register, and never make
    `import torch` fail (an error here is a warning; `import strata.torch` raises it).

    Defined before this module imports torch: when `import strata.torch` is what first imports
    torch, torch calls the entry point while this module is still loading; it then does nothing,
    and the module registers the backend itself once torch has loaded (at its end)."""
    if "register" not in globals():
        return
    try:
        register()
    except Exception as error:  # noqa: BLE001 - reported, and import strata.torch repeats it
        warnings.warn(f"strata: the torch backend was not registered: {error}", stacklevel=2)


import torch  # noqa: E402 - after _autoload, which torch may call during this import
import torch.distributed as dist  # noqa: E402

from . import Comm  # noqa: E402
from . import DiLoCo as _DiLoCoState  # noqa: E402
from . import _torch  # noqa: E402
from ._host import copy_mirrored, diloco_due, host_copy  # noqa: E402

__all__ = ["BACKEND", "DEVICES", "DiLoCo", "register", "stats"]
BACKEND = "strata"
DEVICES = ["cpu", "cuda"]


def register() -> None:
    """Register the "strata" backend with torch.distributed (idempotent), and let
    dist.monitored_barrier run on it."""
    if BACKEND.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND, _torch.create_backend, devices=DEVICES)
    _allow_monitored_barrier()


def stats() -> Dict[str, int]:
    """What this process's "strata" process groups sent, all of them together (groups already
    destroyed included): messages_sent, data_bytes_sent, wire_bytes_sent (after compression),
    wan_bytes_sent (the part sent to ranks of another site, as STRATA_SITE declares them), and
    groups, how many are live. strata.Comm.stats() gives one communicator's."""
    return _torch.stats()


def _allow_monitored_barrier() -> None:
    """torch's monitored_barrier refuses every backend but gloo before asking the backend; on a
    strata group, it goes to strata's (rank 0 names the ranks that did not arrive)."""
    c10d = dist.distributed_c10d
    original = c10d.monitored_barrier
    if getattr(original, "_strata", False):
        return

    @functools.wraps(original)
    def monitored_barrier(group: Any = None, timeout: Optional[timedelta] = None,
                          wait_all_ranks: bool = False) -> Any:
        if c10d._rank_not_in_group(group) or dist.get_backend(group) != BACKEND:
            return original(group=group, timeout=timeout, wait_all_ranks=wait_all_ranks)
        if timeout is None:
            timeout = c10d._get_default_timeout(dist.Backend(BACKEND))
        elif isinstance(timeout, (int, float)):
            timeout = timedelta(seconds=timeout)
        group_to_use = c10d._get_default_group() if group is None else group
        # ProcessGroup has monitored_barrier at run time; torch's stub leaves it out
        return group_to_use.monitored_barrier(  # type: ignore[union-attr]
            timeout, wait_all_ranks=wait_all_ranks)

    monitored_barrier._strata = True  # type: ignore[attr-defined]
    c10d.monitored_barrier = monitored_barrier
    dist.monitored_barrier = monitored_barrier


register()


_diloco_comms = itertools.count()  # numbers the communicators made for DiLoCo, alike on all ranks


def _diloco_comm() -> Comm:
    """A communicator of its own for a DiLoCo with comm=None.

    With a default process group (of any backend), its ranks join through that group's store,
    as the "strata" backend's groups do, under a job id rank 0 draws: nothing but torch's
    rendezvous is needed and the process group's own calls are untouched. Without one, the
    communicator comes from the environment (strata launch sets STRATA_RANK, STRATA_ADDR...).
    """
    if not (dist.is_available() and dist.is_initialized()):
        return Comm()
    # PrefixStore is torch.distributed's at run time; its stub does not re-export it
    store = dist.PrefixStore(f"strata_diloco/{next(_diloco_comms)}",  # type: ignore[attr-defined]
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

    The model's parameters must be contiguous float32 or bfloat16 tensors, stay the same
    tensors (strata updates their memory in place: never rebind `.data`) and have the same
    shapes on every rank. Creating it is collective: every rank starts from rank 0's parameters.
    Parameters on a GPU (any device but the CPU) are mirrored in pinned host memory, where
    theta_global and the outer momentum live too (as OpenDiLoCo and prime keep them): a
    fragment's parameters are copied to the host just before its exchange starts or is applied,
    and back to the device once applied, so each outer step moves each fragment down and up once.

    comm: a strata.Comm; None makes one (see _diloco_comm: through the default process group's
    store when there is one, else from the environment), owned and closed by this object.

    Alone (a world of one: the outer step then applies this worker's own progress), or under
    `strata launch -n 4` or torchrun with every rank running the same:

    >>> import torch, strata.torch
    >>> model = torch.nn.Linear(4, 2)
    >>> opt = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> with strata.torch.DiLoCo(model, opt, sync_every=2, outer_lr=1.0) as diloco:
    ...     for step in range(4):
    ...         diloco.zero_grad()
    ...         model(torch.ones(8, 4)).square().mean().backward()
    ...         loss = diloco.step()
    ...     print(diloco.inner_steps, diloco.outer_steps)
    4 2
    """

    # ---- a model sharded by FSDP2 (DTensor parameters): strata/diloco_sharded.py ----
    def __new__(cls, model: Any = None, *args: Any, **kwargs: Any) -> Any:
        if cls is DiLoCo and model is not None:
            from .diloco_sharded import ShardedDiLoCo, is_sharded_model
            if is_sharded_model(model):
                return ShardedDiLoCo(model, *args, **kwargs)
        return super().__new__(cls)

    def __init__(self, model: Union[torch.nn.Module, Iterable[torch.Tensor]],
                 inner_optimizer: torch.optim.Optimizer, sync_every: int = 100,
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, nesterov: bool = True,
                 fragments: int = 1, delay: int = 0, alpha: float = 0.5,
                 compress: Optional[str] = "none", comm: Optional[Comm] = None,
                 _mirror_all: bool = False) -> None:
        params = list(cast(torch.nn.Module, model).parameters() if hasattr(model, "parameters")
                      else model)
        if not params:
            raise ValueError("the model has no parameters")
        seen = set()
        for i, p in enumerate(params):
            if not isinstance(p, torch.Tensor):
                raise TypeError(f"parameter {i} is a {type(p).__name__}, not a torch tensor")
            if p.layout != torch.strided:
                raise TypeError(f"parameter {i} is a {p.layout} tensor; DiLoCo takes dense ones")
            if p.device.type == "meta":
                raise TypeError(f"parameter {i} is on the meta device: it holds no values")
            if p.dtype not in (torch.float32, torch.bfloat16):
                raise TypeError(f"parameter {i} is {p.dtype}; strata's DiLoCo takes "
                                "torch.float32 or torch.bfloat16 parameters")
            if not p.is_contiguous():
                raise ValueError(f"parameter {i} (shape {tuple(p.shape)}) is not contiguous; "
                                 "strata's DiLoCo updates parameters in place")
            key = (p.device, p.data_ptr())
            if key in seen:
                raise ValueError(f"parameter {i} shares its memory with another parameter")
            seen.add(key)
        self.inner_optimizer = inner_optimizer
        self._params = params
        # what strata reads and writes: the parameter itself on the CPU, else a host mirror
        # (_mirror_all mirrors CPU parameters too: the tests' way to run the device path here)
        self._hosts = [host_copy(p) if (p.device.type != "cpu" or _mirror_all) else p
                       for p in params]
        self._mirrored = any(h is not p for h, p in zip(self._hosts, params))
        self.last_applied = 0  # fragments the last step() applied
        self._owns_comm = comm is None
        self.comm = _diloco_comm() if comm is None else comm
        self._sync_every, self._delay = int(sync_every), int(delay)
        try:
            with torch.no_grad():
                self._state = _DiLoCoState(
                    self.comm, [h.detach() for h in self._hosts], sync_every=sync_every,
                    outer_lr=outer_lr, outer_momentum=outer_momentum, nesterov=nesterov,
                    fragments=fragments, delay=delay, alpha=alpha, compress=compress)
        except BaseException:
            if self._owns_comm:
                self.comm.destroy()
            raise
        self._ranges = [self._state.fragment(f) for f in range(self._state.fragments)]
        self._to_device(range(len(params)))  # every rank starts from rank 0's parameters

    # ---- the host mirrors of device parameters ----
    def _fragment_params(self, fragments: Iterable[int]) -> list[int]:
        return [i for f in fragments for i in range(self._ranges[f][0], sum(self._ranges[f]))]

    def _due(self, step: int) -> tuple[list[int], list[int]]:
        return diloco_due(step, self._sync_every, len(self._ranges), self._delay)

    def _to_host(self, indices: Iterable[int]) -> None:
        copy_mirrored(self._hosts, self._params, indices)

    def _to_device(self, indices: Iterable[int]) -> None:
        copy_mirrored(self._params, self._hosts, indices)

    # ---- training ----
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """The inner optimizer's step, then DiLoCo's: the outer exchanges that are due start and
        those whose delay has passed are applied to the parameters. Returns the closure's loss
        (as torch optimizers do)."""
        loss = self.inner_optimizer.step(closure) if closure is not None \
            else self.inner_optimizer.step()
        if not self._mirrored:
            self.last_applied = self._state.step()
            return loss
        starts, applies = self._due(self._state.inner_steps + 1)
        self._to_host(self._fragment_params(set(starts) | set(applies)))
        self.last_applied = self._state.step()
        self._to_device(self._fragment_params(applies))
        return loss

    def zero_grad(self, set_to_none: bool = False) -> None:
        """The inner optimizer's zero_grad."""
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def inner_steps(self) -> int:
        """Inner steps counted so far."""
        return self._state.inner_steps

    @property
    def outer_steps(self) -> int:
        """Outer steps applied so far, over all fragments."""
        return self._state.outer_steps

    @property
    def fragments(self) -> int:
        """The number of fragments the parameters are exchanged in."""
        return self._state.fragments

    # ---- checkpoints ----
    def state_dict(self) -> Dict[str, Any]:
        """The inner optimizer's state, strata's outer state (global parameters, momentum,
        counters) as bytes, and the counters. Not the model: save model.state_dict() too."""
        return {"inner_optimizer": self.inner_optimizer.state_dict(),
                "diloco": self._state.save(),
                "inner_steps": self._state.inner_steps,
                "outer_steps": self._state.outer_steps}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores what state_dict() returned, into a DiLoCo over the same parameters and
        options (load the model's state_dict as well)."""
        self._to_host(range(len(self._params)))
        self._state.load(state_dict["diloco"])
        self.inner_optimizer.load_state_dict(state_dict["inner_optimizer"])

    # ---- the communicator ----
    def set_comm(self, comm: Comm) -> None:
        """Move to another communicator of the same workers or of fewer (after a shrink)."""
        self._state.set_comm(comm)
        if self._owns_comm:
            self._owns_comm = False
            old, self.comm = self.comm, comm
            old.destroy()
        else:
            self.comm = comm

    def sync(self, comm: Comm) -> bool:
        """Collective over `comm` (after comm.grow()): every rank takes the members' outer state;
        returns True on a rank that pulled it (a joiner), whose parameters restart from
        theta_global."""
        self._to_host(range(len(self._params)))
        pulled = self._state.sync(comm)
        self._to_device(range(len(self._params)))
        if self._owns_comm and comm is not self.comm:
            self._owns_comm = False
            old, self.comm = self.comm, comm
            old.destroy()
        else:
            self.comm = comm
        return pulled

    def close(self) -> None:
        """Wait for exchanges in flight and free strata's state (and the communicator made for
        it). Idempotent."""
        self._state.close()
        if self._owns_comm:
            self._owns_comm = False
            self.comm.destroy()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return (f"<strata.torch.DiLoCo {len(self._params)} parameters, {self.inner_steps} inner "
                f"and {self.outer_steps} outer steps>")
