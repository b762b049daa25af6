# SPDX-License-Identifier: Apache-2.0
"""DiLoCo over a model sharded inside each site by FSDP2 (docs/diloco.md, "Sharded sites").

strata.torch.DiLoCo hands a model whose parameters are DTensors (fully_shard) to ShardedDiLoCo.
Inside a site the model is sharded and trained by FSDP2 as usual; across sites, each rank
averages its own shards with the ranks that hold the same shards in the other sites, over one
strata communicator per shard index. A site therefore sends its model across the WAN once per
outer step, split over its ranks, which exchange in parallel.

Two ways to say where the sites are:

- a 2-D DeviceMesh (sites x shard) over the default process group, the model wrapped by
  fully_shard over its "shard" sub-mesh: the sites and this rank's site come from the mesh;
- a process group per site (the default group holds one site's ranks, the model wrapped over it)
  and a store every site reaches (store=, site=, sites=): the shape that survives a site's death
  and admits a site that (re)starts (join=True), since no torch group spans two sites.

The fragments of Streaming DiLoCo are cut over the full model's parameters, exactly as
strata.torch.DiLoCo cuts them for the unsharded model, so both train alike; each fragment is a
strata.DiLoCo of its own over this rank's shards of its parameters, driven by the schedule here.
"""
from __future__ import annotations

import hashlib
import io
import secrets
import time
from typing import Any, Callable, Iterable, Optional, Sequence

import numpy as np
import torch
import torch.distributed as dist

import strata as _package

from . import Comm
from . import DiLoCo as _State
from ._host import copy_mirrored, diloco_due, host_copy

try:
    from torch.distributed.tensor import DTensor
except ImportError:  # torch < 2.4: no public DTensor, hence no FSDP2 model to shard
    DTensor = None  # type: ignore[assignment,misc]

__all__ = ["ShardedDiLoCo", "is_sharded_model", "split_fragments"]

# the errors a dead or frozen site gives an exchange; the survivors shrink and repeat it
_LOST: tuple[type[BaseException], ...] = tuple(
    getattr(_package, name) for name in ("PeerLostError", "TimeoutError", "AbortedError",
                                         "RevokedError"))


def is_sharded_model(model: Any) -> bool:
    """True when `model`'s parameters are DTensors (a model wrapped by fully_shard)."""
    if DTensor is None or not hasattr(model, "parameters"):
        return False
    return any(isinstance(p, DTensor) for p in model.parameters())


def split_fragments(counts: Sequence[int], fragments: int) -> list[tuple[int, int]]:
    """(first parameter, parameter count) of each fragment: contiguous ranges of whole
    parameters, each boundary at the parameter edge closest to an equal share of the elements,
    every range at least one parameter. The cut strata_diloco_create makes (src/train/diloco.c),
    here over the full model's parameters so that every shard of a site cuts alike."""
    n, total = len(counts), sum(counts)
    begin = [0] * (n + 1)
    for i, c in enumerate(counts):
        begin[i + 1] = begin[i] + c
    out, edge = [], 0
    for p in range(fragments):
        end = n
        if p + 1 < fragments:
            target = total * (p + 1) / fragments
            end = edge + 1
            while end < n - (fragments - p - 1):
                if abs(begin[end + 1] - target) >= abs(begin[end] - target):
                    break
                end += 1
        out.append((edge, end - edge))
        edge = end
    return out


def _flat_coordinate(mesh: Any) -> int:
    """This rank's index in `mesh`, row-major over its dimensions."""
    coordinate = mesh.get_coordinate()
    index = 0
    for size, at in zip(mesh.mesh.shape, coordinate):
        index = index * size + at
    return index


class ShardedDiLoCo:
    """DiLoCo / Streaming DiLoCo for a model sharded by FSDP2 inside each site.

    Made by strata.torch.DiLoCo(model, inner_optimizer, ...) when the model's parameters are
    DTensors; the options are strata.torch.DiLoCo's, plus:

    mesh: the 2-D (or more) DeviceMesh whose `site_dim` dimension is the sites (default: the
      root mesh of the parameters' mesh). The model must be wrapped over the other dimensions
      only (mesh["shard"]): a model wrapped over the sites too (HSDP) synchronises every step.
    store, site, sites: instead of a mesh, a store every site reaches (a torch Store, such as a
      TCPStore that outlives the sites) with this site's index and the site count; each site's
      ranks form the default process group. `job` names the run in that store (the same at
      every site). Only this shape survives a dead site (the survivors shrink each shard's
      communicator) and admits sites that start later (join=True).
    timeout: the shard communicators' STRATA_TIMEOUT in seconds (None: the environment's).

    Every rank of every site creates it at once (join=True: a site that starts later; it returns
    once the running sites admitted it at the end of an outer step and gave it their state).
    """

    def __init__(self, model: Any, inner_optimizer: Any, sync_every: int = 100,
                 outer_lr: float = 0.7, outer_momentum: float = 0.9, nesterov: bool = True,
                 fragments: int = 1, delay: int = 0, alpha: float = 0.5,
                 compress: Optional[str] = "none", comm: Optional[Comm] = None, *,
                 mesh: Any = None, site_dim: str = "site", store: Any = None,
                 site: Optional[int] = None, sites: Optional[int] = None,
                 job: str = "strata-diloco", timeout: Optional[float] = None,
                 join: bool = False, _mirror_all: bool = False) -> None:
        if comm is not None:
            raise ValueError("a sharded model gets one communicator per shard, made here: "
                             "leave comm=None (give mesh= or store=/site=/sites=)")
        params = list(model.parameters())
        if not params or not all(isinstance(p, DTensor) for p in params):
            raise TypeError("every parameter of a sharded model must be a DTensor "
                            "(wrap the model with fully_shard)")
        pmesh = params[0].device_mesh
        if any(p.device_mesh != pmesh for p in params):
            raise ValueError("the parameters lie on different device meshes")
        H, P, tau = int(sync_every), int(fragments), int(delay)
        if H < 1 or P < 1 or P > H or P > len(params):
            raise ValueError("fragments (P) must lie in 1..sync_every and 1..number of parameters")
        if tau < 0 or tau > H // P - 1:
            raise ValueError("delay must lie in 0..sync_every/fragments - 1")
        self.inner_optimizer = inner_optimizer
        self._model, self._params = model, params
        self._locals = [p.to_local() for p in params]
        for i, t in enumerate(self._locals):
            if t.dtype not in (torch.float32, torch.bfloat16):
                raise TypeError(f"parameter {i} is {t.dtype}; DiLoCo takes float32 or bfloat16")
            if t.device.type == "meta":
                raise TypeError(f"parameter {i} is on the meta device: it holds no values")
            if t.numel() and not t.is_contiguous():
                raise ValueError(f"parameter {i}'s shard is not contiguous")
        # what strata reads and writes: the shard itself on the CPU, else a host mirror (as
        # strata.torch.DiLoCo does; _mirror_all: the tests' way to run that path on the CPU)
        self._hosts = [host_copy(t) if (t.device.type != "cpu" or _mirror_all) else t
                       for t in self._locals]
        self._sync_every, self._delay, self._alpha = H, tau, float(alpha)
        # strata.DiLoCo's keyword arguments, the same for every fragment
        self._options: dict[str, Any] = dict(
            sync_every=H, outer_lr=float(outer_lr), outer_momentum=float(outer_momentum),
            nesterov=bool(nesterov), fragments=1, delay=tau, alpha=float(alpha),
            compress=compress)

        # ---- where this rank stands: its site and shard index ----
        elastic = store is not None
        if store is None:
            if join:
                raise ValueError("join=True needs store=, site= and sites=")
            root = mesh if mesh is not None else pmesh._get_root_mesh()
            names = root.mesh_dim_names or ()
            if site_dim not in names:
                raise ValueError(f"the mesh has no {site_dim!r} dimension (its dimensions: "
                                 f"{names}); give mesh= a DeviceMesh of sites x shards")
            if site_dim in (pmesh.mesh_dim_names or ()):
                raise ValueError(f"the model is sharded or replicated over the {site_dim!r} "
                                 "dimension (HSDP synchronises every step): wrap it with "
                                 f"fully_shard(..., mesh=mesh[<the other dimensions>])")
            site, sites = root.get_local_rank(site_dim), root.size(names.index(site_dim))
            # PrefixStore is torch.distributed's at run time; its stub does not re-export it
            store = dist.PrefixStore("strata_diloco_sharded",  # type: ignore[attr-defined]
                                     dist.distributed_c10d._get_default_store())
            key = f"job/{next(_runs)}"
            if dist.get_rank() == 0:
                store.set(key, f"diloco-{secrets.token_hex(8)}")
            job = store.get(key).decode()
        elif site is None or sites is None:
            raise ValueError("store= needs site= and sites=")
        self.site, self.sites = int(site), int(sites)
        self.shard, self.shards = _flat_coordinate(pmesh), pmesh.size()
        self._elastic = elastic
        self._store, self._job, self._timeout = store, job, timeout

        # ---- fragments over the full model, each a strata.DiLoCo over this rank's shards ----
        self._cuts = split_fragments([p.numel() for p in params], P)
        self._frag_params = [[i for i in range(first, first + n) if self._locals[i].numel()]
                             for first, n in self._cuts]
        self.inner_steps = 0
        self.last_applied = 0
        self._in_flight: dict[int, list[torch.Tensor]] = {}  # fragment -> theta_local at start
        self._admitted = 0
        self.comm = self._connect(join)
        self._states: list[Optional[_State]] = []
        with torch.no_grad():
            for f in range(P):
                tensors = [self._hosts[i] for i in self._frag_params[f]]
                self._states.append(_State(None if join else self.comm, tensors,
                                           **self._options) if tensors else None)
        # wall time of the last step's outer exchanges (starts, applies, and any fail-over to
        # the survivors), copies to and from host mirrors included; 0.0 when none was due
        self.exchange_seconds = 0.0
        if join:
            self._join_sync()
        self._to_device(range(len(params)))  # every site starts from site 0's parameters

    # ---- communicators ----
    def _shard_store(self) -> Any:
        # PrefixStore is torch.distributed's at run time; its stub does not re-export it
        return dist.PrefixStore(f"{self._job}/shard{self.shard}",  # type: ignore[attr-defined]
                                self._store)

    def _connect(self, join: bool) -> Comm:
        settings: dict[str, Any] = dict(job_id=f"{self._job}-shard{self.shard}")
        if self._timeout is not None:
            settings["timeout"] = self._timeout
        if join:
            # counted before waiting, so the running sites admit whole sites only
            self._store.add(f"{self._job}/waiting", 1)
            return Comm(store=self._shard_store(), join=1, **settings)
        return Comm(store=self._shard_store(), rank=self.site, world_size=self.sites, **settings)

    def _each_state(self) -> Iterable[_State]:
        return (s for s in self._states if s is not None)

    def _replace_comm(self, new: Comm) -> None:
        for s in self._each_state():
            s.set_comm(new)
        old, self.comm = self.comm, new
        old.destroy()

    def _shrink(self) -> None:
        """The survivors' communicator of this shard, after an exchange failed."""
        self._replace_comm(self.comm.shrink())

    # ---- host mirrors of device shards ----
    def _to_host(self, indices: Iterable[int]) -> None:
        copy_mirrored(self._hosts, self._locals, indices)

    def _to_device(self, indices: Iterable[int]) -> None:
        copy_mirrored(self._locals, self._hosts, indices)

    # ---- the schedule (strata_diloco_step's) ----
    def _due(self, s: int) -> tuple[list[int], list[int]]:
        return diloco_due(s, self._sync_every, len(self._cuts), self._delay)

    def _start(self, f: int, snapshot: Optional[list[torch.Tensor]] = None) -> None:
        """Starts fragment f's exchange; from `snapshot` (theta_local when it first started)
        when it is restarted, so a restart sends the bytes the first start sent."""
        state = self._states[f]
        if state is None:
            return
        tensors = [self._hosts[i] for i in self._frag_params[f]]
        with torch.no_grad():
            if snapshot is None:
                self._to_host(self._frag_params[f])
                if self._delay:
                    self._in_flight[f] = [t.clone() for t in tensors]
                state.outer_start(0)
                return
            now = [t.clone() for t in tensors]
            for t, v in zip(tensors, snapshot):
                t.copy_(v)
            try:
                state.outer_start(0)
            finally:
                for t, v in zip(tensors, now):
                    t.copy_(v)

    def _finish(self, f: int) -> None:
        state = self._states[f]
        if state is not None:
            with torch.no_grad():
                if self._delay:  # the merge reads theta_local as it is now
                    self._to_host(self._frag_params[f])
                state.outer_finish(0)
            self._to_device(self._frag_params[f])
        self._in_flight.pop(f, None)

    def _restart_in_flight(self) -> None:
        for f in sorted(self._in_flight):
            self._start(f, self._in_flight[f])

    def _outer(self, starts: list[int], applies: list[int]) -> int:
        """Starts and applies the exchanges due; when a site died, shrinks and repeats them over
        the survivors (the fragments are as they were before: nothing is lost or doubled)."""
        began = time.monotonic()
        pending_starts = list(starts)
        pending_applies = list(applies)
        failures = 0
        while True:
            try:
                while pending_starts:
                    self._start(pending_starts[0])
                    pending_starts.pop(0)
                while pending_applies:
                    self._finish(pending_applies[0])
                    pending_applies.pop(0)
                break
            except _LOST:
                failures += 1
                if self.comm.size <= 1 or failures > self.sites:
                    raise
                self._shrink()
                # every exchange in flight was abandoned: start them again, from the bytes
                # their first start sent (the just-started ones included)
                restarted = [f for f in self._in_flight if f not in pending_starts]
                for f in sorted(restarted):
                    self._start(f, self._in_flight[f])
                for f in [f for f in pending_applies
                          if f not in self._in_flight and f not in pending_starts]:
                    # delay 0: applied right after its start, restart it from theta_local
                    self._start(f)
        self.exchange_seconds = time.monotonic() - began if starts or applies else 0.0
        return len(applies)

    # ---- training ----
    def step(self, closure: Optional[Callable[[], Any]] = None) -> Any:
        """The inner optimizer's step, then the outer exchanges that are due (see
        strata.torch.DiLoCo.step); sites that wait to join are admitted after fragment 0's
        exchange was applied."""
        for i, p in enumerate(self._params):
            if p.to_local().data_ptr() != self._locals[i].data_ptr():
                raise RuntimeError(f"parameter {i}'s shard moved; DiLoCo needs the memory "
                                   "fully_shard gave it (do not rebind .data)")
        loss = self.inner_optimizer.step(closure) if closure is not None \
            else self.inner_optimizer.step()
        s = self.inner_steps + 1
        starts, applies = self._due(s)
        self.last_applied = self._outer(starts, applies)
        self.inner_steps = s
        if 0 in applies and not self._in_flight and self._elastic:
            self._admit(s)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.inner_optimizer.zero_grad(set_to_none=set_to_none)

    @property
    def outer_steps(self) -> int:
        """Outer steps applied by this rank, over its fragments."""
        return sum(s.outer_steps for s in self._each_state())

    @property
    def fragments(self) -> int:
        return len(self._cuts)

    # ---- sites that join ----
    def _admit(self, s: int) -> None:
        """At the end of an outer step with nothing in flight: admit whole sites that wait.
        The decision is the first one written for step s, so every member takes it alike."""
        waiting = int(self._store.add(f"{self._job}/waiting", 0)) - self._admitted
        whole = (waiting // self.shards) * self.shards
        key = f"{self._job}/admit/{s}"
        # compare_set returns the value the key holds afterwards: the first member's
        total = int(self._store.compare_set(key, "", str(whole + self._admitted)).decode())
        if total <= self._admitted:
            return
        self._admitted = total
        deadline = time.monotonic() + 60.0
        grown = None
        while grown is None:
            grown = self.comm.grow()
            if grown is None:
                if time.monotonic() > deadline:
                    raise RuntimeError("a site counted as waiting to join never came")
                time.sleep(0.01)
        self._sync_members(grown)

    def _sync_members(self, grown: Comm) -> None:
        old = self.comm
        self.comm = grown
        for state in self._each_state():
            state.sync(grown)
        old.destroy()
        self._share_local(member=True)

    def _join_sync(self) -> None:
        for state in self._each_state():
            state.sync(self.comm)
        self._share_local(member=False)

    def _share_local(self, member: bool) -> None:
        """The joiner takes rank 0's theta_local shards and counters (shared state: digests
        compared, the bytes pulled and checked against theirs); the members keep their own."""
        if member:
            self._to_host(range(len(self._locals)))
        names = {f"p{i}": (t.detach().clone() if member else t.detach())
                 for f in self._frag_params for i in f for t in [self._hosts[i]]}
        counters = np.array([self.inner_steps, self._admitted], dtype=np.int64)
        names["counters"] = counters
        rank0 = member and self.comm.rank == 0
        buffers = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in names.items()}
        with torch.no_grad():
            self.comm.sync_shared(buffers, revision=2 if rank0 else (1 if member else 0))
        if not member:
            self.inner_steps, self._admitted = int(counters[0]), int(counters[1])

    # ---- checkpoints (torch.distributed.checkpoint's Stateful) ----
    def state_dict(self) -> dict[str, Any]:
        """This rank's DiLoCo state under keys of its own site and shard (DCP keeps every rank's
        bytes): the outer state of each fragment, theta_local of the fragments in flight as their
        exchange started, and the inner step count. Save the model and inner optimizer with
        torch.distributed.checkpoint.state_dict's get_state_dict, under a key of the site."""
        blob = {"inner_steps": self.inner_steps, "admitted": self._admitted,
                "states": [s.save() if s is not None else b"" for s in self._states],
                "in_flight": {f: [t.clone() for t in v] for f, v in self._in_flight.items()}}
        buffer = io.BytesIO()
        torch.save(blob, buffer)
        return {f"site{self.site}.shard{self.shard}": buffer.getvalue()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores state_dict() (load the model and inner optimizer too); exchanges that were in
        flight start again from their saved bytes (collective: every rank loads at once)."""
        raw = state_dict[f"site{self.site}.shard{self.shard}"]
        if isinstance(raw, io.BytesIO):
            raw = raw.getvalue()
        blob = torch.load(io.BytesIO(raw), weights_only=True)
        for s, b in zip(self._states, blob["states"]):
            if s is not None:
                s.load(b)
        self.inner_steps, self._admitted = int(blob["inner_steps"]), int(blob["admitted"])
        self._in_flight = {int(f): v for f, v in blob["in_flight"].items()}
        self._restart_in_flight()

    def digest(self) -> str:
        """BLAKE2b of this rank's outer state (to compare ranks in tests and logs)."""
        h = hashlib.blake2b(digest_size=16)
        for s in self._each_state():
            h.update(s.save())
        return h.hexdigest()

    # ---- the end ----
    def close(self) -> None:
        for s in self._each_state():
            s.close()
        self._states = []
        if self.comm is not None:
            self.comm.destroy()
            self.comm = None  # type: ignore[assignment]

    def __enter__(self) -> "ShardedDiLoCo":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<strata.torch.DiLoCo (sharded) site {self.site} of {self.sites}, shard "
                f"{self.shard} of {self.shards}, {self.inner_steps} inner steps>")


_runs = iter(range(1 << 62))  # numbers the runs made over one default group, alike on all ranks
