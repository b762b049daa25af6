# SPDX-License-Identifier: Apache-2.0
"""strata.kv: one-sided transfers of registered memory between processes, and the lane.

    import numpy as np, strata.kv as kv
    agent = kv.Agent("decode", secret="s3cret")          # listens on 127.0.0.1, any port
    cache = np.zeros(1 << 20, np.float32)
    region = agent.register(cache)                      # numpy, bytearray, torch tensor
    agent.publish("127.0.0.1:29400")                    # or: blob = agent.metadata()
    ...
    peer = agent.fetch("127.0.0.1:29400", "prefill")    # or: peer = agent.load(blob)
    t = agent.read(peer, [(region, 0, 4096)], [(peer.regions[0], 0, 4096)])
    t.wait()                                            # raises the failure, if any

The lane: `agent.set_handler(fn)` runs fn(from_name, tag, request: bytes) -> bytes for each
request a peer sends with `agent.call(peer, tag, request)`; an exception in fn reaches the
caller as an error (its status for a strata.Error, AbortedError otherwise). Semantics, limits
and the safety rules are the C library's: include/strata_kv.h and docs/kv.md.
"""
from __future__ import annotations

import atexit
import weakref
from typing import (TYPE_CHECKING, Any, Dict, Iterable, List, NamedTuple, NoReturn, Optional,
                    Sequence, Tuple, Union)

from . import Error, UnsupportedError, _errors
from . import _kv, _strata
from ._host import host_copy

if TYPE_CHECKING:
    import torch
    from typing_extensions import Self, TypeAlias

    from . import BufferLike
    from ._kv import Handler

    #: A local side of a transfer: a Region, (Region, offset, nbytes), or Desc(addr, nbytes).
    LocalItem: TypeAlias = Union["Region", Tuple["Region", int, int], "Desc", Tuple[int, int]]
    #: A remote side: a RemoteRegion, (RemoteRegion, offset, nbytes), or Desc(addr, nbytes,
    #: region).
    RemoteItem: TypeAlias = Union["RemoteRegion", Tuple["RemoteRegion", int, int], "Desc",
                                  Tuple[int, int, int]]

_STATUS_NAMES = _strata.status_names()

_kv._set_errors(Error, _errors)

__all__ = ["Agent", "Region", "RemoteRegion", "Desc", "Peer", "Transfer", "Store", "StoreServer",
           "LANE_MAX_BYTES", "NOTIF_MAX_BYTES", "backend_supported"]

LANE_MAX_BYTES = _kv.LANE_MAX_BYTES
NOTIF_MAX_BYTES = _kv.NOTIF_MAX_BYTES
Store = _kv.Store
StoreServer = _kv.StoreServer

# strata_kv_backend's names (those STRATA_KV_BACKEND takes) and values, from the C library.
_BACKENDS: Dict[str, int] = _kv.backends()
_BACKEND_NAMES: Dict[int, str] = {v: k for k, v in _BACKENDS.items()}
_IN_PROGRESS = -16


def backend_supported(backend: str) -> bool:
    """Whether this libstrata has a backend: "auto", "tcp" and "shm" always; "ucx" when it was
    built with libucx (docs/kv.md). ValueError for a name that is none of them."""
    return _kv.backend_supported(_backend_code(backend))


def _backend_code(backend: str) -> int:
    code = _BACKENDS.get(backend.lower()) if isinstance(backend, str) else None
    if code is None:
        raise ValueError(f"unknown backend {backend!r} (one of: {', '.join(_BACKENDS)})")
    return code


class RemoteRegion(NamedTuple):
    """A peer's region as its metadata describes it."""
    id: int
    addr: int
    nbytes: int


class Desc(NamedTuple):
    """A raw descriptor in any address space: addr, nbytes, and (remote side) the region id."""
    addr: int
    nbytes: int
    region: int = 0


_live_agents: weakref.WeakSet[Agent] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Serving threads take the GIL to run a handler: stop them while the interpreter still runs.
    for agent in list(_live_agents):
        agent.close()


def _staged_device(tensor: torch.Tensor) -> bool:
    """Whether a tensor goes through a host copy (tests replace this to run that path here)."""
    return tensor.device.type != "cpu"


def _raise(status: int, message: str) -> NoReturn:
    raise _errors.get(status, Error)(status, _status_name(status), message)


def _status_name(status: int) -> str:
    return _STATUS_NAMES.get(status, str(status))


class Region:
    """Memory registered with an agent: .id, .addr, .nbytes; its owner is kept alive.

    A torch tensor on a GPU (any device but the CPU) is staged: the region is a pinned host
    copy of it (.host), which peers read and write. The agent's own transfers keep the two in
    step (a WRITE copies the device's bytes to the host first; a READ's wait() copies what
    arrived to the device); after a peer's one-sided WRITE (its notification), call pull() to
    bring the bytes to the device, and push() before peers READ what the device computed.
    Agent.register makes one; see Agent for an example.
    """

    def __init__(self, agent: Agent, obj: BufferLike) -> None:
        self.host: Optional[torch.Tensor] = None
        self._owner: object
        if type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr"):
            tensor: torch.Tensor = obj  # type: ignore[assignment]  # a torch tensor
            if not tensor.is_contiguous():
                raise ValueError("the tensor is not contiguous (call .contiguous() first)")
            if tensor.device.type == "meta":
                raise TypeError("a tensor on the meta device holds no memory to register")
            owner = tensor
            if _staged_device(tensor):
                self.host = host_copy(tensor)
                owner = self.host
            self.addr, self.nbytes = owner.data_ptr(), owner.numel() * owner.element_size()
            self._owner = owner
        else:
            # holds the export: a numpy array cannot be resized under it
            view = memoryview(obj)  # type: ignore[arg-type]  # not a tensor: a buffer
            if not view.c_contiguous:
                raise ValueError("the buffer is not C-contiguous (numpy: np.ascontiguousarray)")
            if view.readonly:
                raise TypeError("the buffer is read-only; a region must be writable")
            self.addr, self.nbytes = _kv.address(view)
            self._owner = view
        if self.nbytes == 0:
            raise ValueError("a region needs at least one byte")
        self.agent = agent
        self.id = agent._c.register(self.addr, self.nbytes)
        self.obj = obj
        self.active = True

    def push(self) -> None:
        """A device tensor's bytes to its host copy (waits for the device's queued work)."""
        if self.host is not None:
            self.host.copy_(self.obj)  # type: ignore[arg-type]  # host is set for tensors only

    def pull(self) -> None:
        """The host copy's bytes to the device tensor."""
        if self.host is not None:
            self.obj.copy_(self.host)  # type: ignore[union-attr]  # host is set for tensors only

    def deregister(self) -> None:
        """Withdraw the region (waits for copies touching it now); transfers still holding it keep
        its memory alive until they are released."""
        if self.active:
            self.active = False
            self.agent._regions.pop(self.id, None)
            self.agent._c.deregister(self.id)

    def desc(self, offset: int = 0, nbytes: Optional[int] = None) -> Desc:
        """A descriptor of bytes [offset, offset + nbytes) of the region (default: to its end)."""
        nbytes = self.nbytes - offset if nbytes is None else nbytes
        if offset < 0 or nbytes < 0:
            raise ValueError("offsets and lengths are not negative")
        return Desc(self.addr + offset, nbytes)

    def __repr__(self) -> str:
        return f"<strata.kv.Region {self.id}: {self.nbytes} bytes at {self.addr:#x}>"


class Peer:
    """A loaded peer: .index, .name, .regions (RemoteRegion list, in its metadata's order),
    .backend ("tcp", "shm" or "ucx"). Agent.load and Agent.fetch make one; see Agent."""

    def __init__(self, agent: Agent, index: int, name: str) -> None:
        self.agent, self.index, self.name = agent, index, name
        self.regions = [RemoteRegion(*r) for r in agent._c.peer_regions(index)]
        self.backend = _BACKEND_NAMES.get(agent._c.peer_backend(index), "?")

    def __repr__(self) -> str:
        return f"<strata.kv.Peer {self.name!r} #{self.index} over {self.backend}>"


class Transfer:
    """A posted READ or WRITE. wait() raises its failure; done(), status, cancel(), release().
    Agent.read and Agent.write make one; see Agent for an example."""

    def __init__(self, c: _kv.Xfer, keep: Optional[List[Region]],
                 pull_after: Iterable[Region] = ()) -> None:
        self._c, self._keep = c, keep
        self._pull_after = list(pull_after)  # device regions a READ fills through their host copy

    @property
    def status(self) -> str:
        """The C status name now: STRATA_ERR_IN_PROGRESS, then STRATA_OK or the failure."""
        code = self._c.status()
        return "STRATA_OK" if code == 0 else _status_name(code)

    def done(self) -> bool:
        """Whether it has ended (succeeded or failed); wait() then says how."""
        return self._c.status() != _IN_PROGRESS

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait (the GIL released) until done; raise its failure. With a timeout, return False
        if it is still running then, True once it succeeded."""
        code = self._c.wait(-1.0 if timeout is None else float(timeout))
        if code == _IN_PROGRESS:
            return False
        if code != 0:
            _raise(code, self._c.error() or "the transfer failed")
        while self._pull_after:
            self._pull_after.pop().pull()
        return True

    def cancel(self) -> None:
        """Stop handing out slices; wait() then gives AbortedError (or success if it finished)."""
        self._c.cancel()

    def release(self) -> None:
        """Cancel, wait and free it; the regions it held may go."""
        self._c.release()
        self._keep = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class Agent:
    """An agent per process: Agent(name, secret=None, backend="auto", **config).

    backend: "auto" (shared memory towards a peer on this host where the kernel allows
    cross-memory attach, else TCP), "tcp", "shm" or "ucx" (UCX active messages: only in a
    libstrata built with libucx; backend_supported("ucx") says, and an agent asking for it
    elsewhere raises UnsupportedError). config: job_id, listen_host ("127.0.0.1"), listen_port
    (0 = any), streams (4), slice_bytes (1 MiB), timeout (10 s), bulk_nice, lane_realtime,
    seal (0 auto, 1, -1). lane_realtime is off here, unlike C's default: a Python handler holds
    the GIL against the interpreter's ordinary threads, and one that runs torch would start
    torch's worker threads from a SCHED_FIFO thread, which they inherit. True gives the lane
    SCHED_FIFO where permitted (docs/kv.md, "The lane").

    Two agents (one per process, normally; here both in one) READ each other's memory and
    talk on the lane:

    >>> import numpy as np, strata.kv as kv
    >>> with kv.Agent("prefill", secret="s3cret") as prefill, \\
    ...         kv.Agent("decode", secret="s3cret") as decode:
    ...     cache = np.arange(1024, dtype=np.float32)
    ...     _ = prefill.register(cache)                     # what peers may read
    ...     prefill.set_handler(lambda sender, tag, request: request.upper())
    ...     peer = decode.load(prefill.metadata())          # or publish/fetch via a store
    ...     local = decode.register(np.zeros(1024, np.float32))
    ...     decode.read(peer, [local], [peer.regions[0]]).wait()
    ...     print(local.obj[:4], decode.call(peer, 1, b"ping"))
    True
    [0. 1. 2. 3.] b'PING'
    """

    def __init__(self, name: str, secret: Optional[str] = None, backend: str = "auto",
                 job_id: Optional[str] = None, listen_host: Optional[str] = None,
                 listen_port: int = 0, streams: int = 0, slice_bytes: int = 0,
                 timeout: float = 0.0, bulk_nice: int = 0, lane_realtime: bool = False,
                 seal: int = 0) -> None:
        code = _backend_code(backend)
        if not _kv.backend_supported(code):
            raise UnsupportedError(-12, "STRATA_ERR_UNSUPPORTED",
                                   f"backend {backend!r}: this libstrata was built without it "
                                   "(UCX needs libucx-dev at build time; docs/kv.md)")
        self._c = _kv.Agent(name, secret, job_id, listen_host, int(listen_port), int(streams),
                            int(slice_bytes), float(timeout), code, int(bulk_nice),
                            1 if lane_realtime else -1, int(seal))
        self._regions: Dict[int, Region] = {}
        self._handler: Optional[Handler] = None
        _live_agents.add(self)

    @property
    def name(self) -> str:
        return self._c.name

    def close(self) -> None:
        """Cancel and release open transfers, stop serving, free the agent."""
        self._c.close()
        self._regions.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- memory and metadata ----
    def register(self, obj: BufferLike) -> Region:
        """Register memory (a writable C-contiguous buffer or a torch tensor) for peers to READ
        and WRITE; the Region keeps it alive."""
        region = Region(self, obj)
        self._regions[region.id] = region
        return region

    def metadata(self) -> bytes:
        """This agent's metadata blob (export again after registering more memory)."""
        return self._c.metadata()

    def load(self, blob: bytes) -> Peer:
        """Connect to the peer a blob describes; a known name is replaced (a restarted peer)."""
        index = self._c.load(blob)
        return Peer(self, index, _blob_name(blob))

    def publish(self, store: str, timeout: float = 10.0) -> None:
        """Put the metadata in the store (HOST:PORT) at kv/<job id>/<name>."""
        self._c.publish(store, float(timeout))

    def fetch(self, store: str, name: str, timeout: float = 10.0) -> Peer:
        """Wait up to timeout for a peer's metadata in the store, then load it."""
        return Peer(self, self._c.fetch(store, name, float(timeout)), name)

    def forget(self, peer: Union[Peer, int]) -> None:
        """Drop a loaded peer (its transfers end first)."""
        self._c.forget(_index(peer))

    def refusals(self) -> Tuple[int, str]:
        """(count, last reason) of what this agent's responder refused."""
        return self._c.refusals()

    # ---- transfers ----
    def _local(self, items: Iterable[LocalItem]) -> Tuple[List[Tuple[int, int]], List[Region]]:
        descs: List[Tuple[int, int]] = []
        keep: List[Region] = []
        for item in items:
            if isinstance(item, Region):
                item = (item, 0, item.nbytes)
            if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], Region):
                region, offset, nbytes = item
                d = region.desc(offset, nbytes)
                descs.append((d.addr, d.nbytes))
                keep.append(region)
            else:
                d = Desc(*item)
                descs.append((d.addr, d.nbytes))
                keep.extend(r for r in self._regions.values()
                            if r.addr <= d.addr < r.addr + r.nbytes)
        return descs, keep

    @staticmethod
    def _remote(items: Iterable[RemoteItem]) -> List[Tuple[int, int, int]]:
        descs: List[Tuple[int, int, int]] = []
        for item in items:
            if isinstance(item, RemoteRegion):
                item = (item, 0, item.nbytes)
            if isinstance(item, tuple) and len(item) == 3 and isinstance(item[0], RemoteRegion):
                region, offset, nbytes = item
                if offset < 0 or nbytes < 0:
                    raise ValueError("offsets and lengths are not negative")
                descs.append((region.addr + offset, nbytes, region.id))
            else:
                d = Desc(*item)
                descs.append((d.addr, d.nbytes, d.region))
        return descs

    def _post(self, op: int, peer: Union[Peer, int], local: Iterable[LocalItem],
              remote: Iterable[RemoteItem], notif: Optional[bytes]) -> Transfer:
        descs, keep = self._local(local)
        staged = [r for r in keep if isinstance(r, Region) and r.host is not None]
        if op == 1:  # a WRITE sends what the device holds now
            for region in staged:
                region.push()
        c = self._c.post(op, _index(peer), descs, self._remote(remote), notif, tuple(keep))
        return Transfer(c, keep, staged if op == 0 else ())

    def read(self, peer: Union[Peer, int], local: Iterable[LocalItem],
             remote: Iterable[RemoteItem]) -> Transfer:
        """Post a READ (remote -> local) of descriptor pairs. Local items: Region, (Region,
        offset, nbytes) or Desc(addr, nbytes); remote items: RemoteRegion, (RemoteRegion,
        offset, nbytes) or Desc(addr, nbytes, region). Returns a running Transfer."""
        return self._post(0, peer, local, remote, None)

    def write(self, peer: Union[Peer, int], local: Iterable[LocalItem],
              remote: Iterable[RemoteItem], notif: Optional[bytes] = None) -> Transfer:
        """Post a WRITE (local -> remote); notif (bytes) reaches the target once every byte is
        in place."""
        return self._post(1, peer, local, remote, notif)

    # ---- notifications and the lane ----
    def notify(self, peer: Union[Peer, int], msg: bytes) -> None:
        """Send a notification (at most NOTIF_MAX_BYTES) to a peer's get_notif()."""
        self._c.notify(_index(peer), bytes(msg))

    def get_notif(self, timeout: float = 0.0) -> Optional[Tuple[str, bytes]]:
        """The oldest notification as (sender name, bytes), or None if none came in time."""
        return self._c.notif_get(float(timeout))

    def set_handler(self, handler: Optional[Handler]) -> None:
        """handler(from_name, tag, request: bytes) -> bytes-like or None, run for each lane
        request on the agent's serving thread of that peer (the GIL taken for it)."""
        self._handler = handler
        self._c.set_handler(handler)

    def handler_errors(self) -> Tuple[int, str]:
        """(count, last) of the exceptions the lane handler raised."""
        return self._c.handler_errors()

    def call(self, peer: Union[Peer, int], tag: int, request: bytes = b"",
             timeout: float = 0.0) -> bytes:
        """Send a request (at most LANE_MAX_BYTES) on the lane and return the reply (bytes).
        timeout <= 0: the agent's. Raises the handler's status."""
        return self._c.lane_call(_index(peer), int(tag), request, float(timeout))

    def __repr__(self) -> str:
        return f"<strata.kv.Agent {self.name!r}>"


def _index(peer: Union[Peer, int]) -> int:
    return peer.index if isinstance(peer, Peer) else int(peer)


def _blob_name(blob: bytes) -> str:
    """The agent name in a metadata blob (after its magic and version, a 16-bit little-endian
    length then the bytes), for display only; '?' if it cannot be read."""
    raw = bytes(blob)
    if len(raw) < 10:
        return "?"
    n = int.from_bytes(raw[8:10], "little")
    return raw[10:10 + n].decode("utf-8", "replace") or "?"
