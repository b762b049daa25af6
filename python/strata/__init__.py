# SPDX-License-Identifier: Apache-2.0
"""strata: collectives over shared memory and TCP, from one host to many datacenters.

    import numpy as np, strata
    with strata.Comm() as comm:            # from the environment: strata launch, torchrun, mpirun
        x = np.ones(1024, np.float32)
        comm.allreduce(x)                  # in place: every rank now holds the sum
        req = comm.allreduce(x, op="avg", async_op=True)
        req.wait()

Buffers are anything with the buffer protocol (numpy arrays, bytearray, memoryview) or CPU torch
tensors, C-contiguous. Without `out`, a call works in place. Counts come from the buffers.
Errors raise subclasses of strata.Error carrying the C status name (`.name`) and its message.
The C API's semantics hold unchanged: docs/api.md and docs/python.md.
"""

from __future__ import annotations

import builtins
from datetime import timedelta
from typing import (TYPE_CHECKING, Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple,
                    Type, Union)

from . import _strata

if TYPE_CHECKING:
    import numpy
    import torch
    from torch._C._distributed_c10d import Store as TorchStore
    from typing_extensions import Buffer, Literal, Protocol, Self, TypeAlias, TypedDict, Unpack

    from ._strata import EnumKind

    #: What a collective reads or writes: anything with the buffer protocol (a numpy array,
    #: bytearray, memoryview) or a CPU torch tensor, C-contiguous.
    BufferLike: TypeAlias = Union[Buffer, "numpy.ndarray[Any, Any]", torch.Tensor]

    class StoreLike(Protocol):
        """A rendezvous store a communicator can join through (torch.distributed's Stores are
        ones): set, get, add and wait as torch.distributed.Store has them."""

        def set(self, key: str, value: bytes, /) -> None: ...
        def get(self, key: str, /) -> bytes: ...
        def add(self, key: str, amount: int, /) -> int: ...
        def wait(self, keys: List[str], timeout: timedelta, /) -> None: ...

    class CollectiveOptions(TypedDict, total=False):
        """The keyword arguments every collective of Comm takes."""

        dtype: Optional[str]  # a dtype name, for buffers whose format has none ("bf16")
        algo: Optional[str]  # "ring", "rhd", "tree", "direct", "hier"; None: the comm's choice
        compress: Optional[str]  # the wire encoding; None: the communicator's
        async_op: bool  # return a Request instead of waiting
        count: Optional[int]  # elements, instead of what the buffers hold

    #: A value of a communicator setting: passed as its text, as the environment would.
    Setting: TypeAlias = Union[str, int, float, None]

    #: A DiLoCo parameter: a float32 buffer, (buffer, "bf16") for bfloat16 bits, or a CPU tensor.
    DiLoCoParam: TypeAlias = Union[BufferLike, Tuple[BufferLike, str]]

    # What _describe hands to C for one buffer: None, an address (a torch tensor's, kept alive
    # by its owner) or the buffer object itself.
    _CArg: TypeAlias = Union[None, int, Buffer, "numpy.ndarray[Any, Any]"]

__version__ = _strata.version()
__all__ = ["Comm", "Request", "DiLoCo", "Error", "__version__"]

Request = _strata.Request


class Error(Exception):
    """A strata call failed: .status (the negative C code), .name (STRATA_ERR_...), .message.

    Each C status has a subclass named after it (STRATA_ERR_PEER_LOST: strata.PeerLostError).
    A subclass whose name is also a Python built-in exception subclasses that built-in too, so
    the built-in's handlers catch it: strata.TimeoutError is a builtins.TimeoutError (an
    OSError) and strata.SystemError a builtins.SystemError. Those two are left out of
    `from strata import *`, which would otherwise hide the built-ins; name them strata.X.

    >>> import numpy as np, strata
    >>> with strata.Comm() as comm:
    ...     try:
    ...         comm.allreduce(np.ones(4, np.float32), op="bxor")   # no bitwise op on floats
    ...     except strata.Error as e:
    ...         print(type(e).__name__, e.status, e.name)
    InvalidArgError -1 STRATA_ERR_INVALID_ARG
    """

    status: int
    name: str
    message: str

    def __init__(self, status: int, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.status, self.name, self.message = status, name, message


# One class per C status (strata.h's strata_status), named from it: STRATA_ERR_PEER_LOST ->
# PeerLostError. They are written out so that type checkers and help() know them; the loop below
# checks them against the C library's names and makes a class for any status new to it.
class InvalidArgError(Error):
    """STRATA_ERR_INVALID_ARG: a bad argument (rank, dtype, op, count, a NULL pointer...)."""


class NoMemoryError(Error):
    """STRATA_ERR_NO_MEMORY: an allocation failed."""


class SystemError(Error, builtins.SystemError):
    """STRATA_ERR_SYSTEM: an operating-system call failed (STRATA_LOG=info says which).

    Also a builtins.SystemError."""


class TimeoutError(Error, builtins.TimeoutError):
    """STRATA_ERR_TIMEOUT: a peer fell silent for STRATA_TIMEOUT, or an operation made no
    progress for STRATA_OP_TIMEOUT.

    Also a builtins.TimeoutError, so `except TimeoutError` catches it:

    >>> import strata.kv as kv
    >>> server = kv.StoreServer(secret="s3cret")
    >>> store = kv.Store(f"127.0.0.1:{server.port}", "s3cret")
    >>> try:
    ...     store.get("a key nobody sets", 0.1)          # waits 0.1 s for it
    ... except TimeoutError as e:                        # the built-in
    ...     print(type(e).__module__, e.name)
    strata STRATA_ERR_TIMEOUT
    >>> store.close()
    >>> server.stop()
    """


class PeerLostError(Error):
    """STRATA_ERR_PEER_LOST: a peer closed its connection or died."""


class MismatchError(Error):
    """STRATA_ERR_MISMATCH: ranks called different collectives, counts, dtypes or ops."""


class AuthError(Error):
    """STRATA_ERR_AUTH: the peer does not know the job's secret."""


class VersionError(Error):
    """STRATA_ERR_VERSION: the peer speaks another protocol version."""


class JobError(Error):
    """STRATA_ERR_JOB: the peer belongs to another job."""


class ProtocolError(Error):
    """STRATA_ERR_PROTOCOL: a malformed or unexpected message arrived."""


class AbortedError(Error):
    """STRATA_ERR_ABORTED: the communicator was aborted by an earlier error."""


class UnsupportedError(Error):
    """STRATA_ERR_UNSUPPORTED: the combination asked for is not implemented (or not built)."""


class ConfigError(Error):
    """STRATA_ERR_CONFIG: a configuration value or environment variable is invalid."""


class ParseError(Error):
    """STRATA_ERR_PARSE: an input file is malformed."""


class NotFoundError(Error):
    """STRATA_ERR_NOT_FOUND: a key, file or name does not exist."""


class InProgressError(Error):
    """STRATA_ERR_IN_PROGRESS: the operation has not completed yet."""


class RevokedError(Error):
    """STRATA_ERR_REVOKED: the communicator was revoked (here or on a peer): shrink it."""


class ExcludedError(Error):
    """STRATA_ERR_EXCLUDED: the survivors went on without this rank: join again (grow)."""


def _class_name(status_name: str) -> str:
    words = status_name.replace("STRATA_ERR_", "").lower().split("_")
    return "".join(w.capitalize() for w in words) + "Error"


def _builtin_exception(name: str) -> Optional[Type[BaseException]]:
    """The built-in exception called `name`, if there is one."""
    value = getattr(builtins, name, None)
    return value if isinstance(value, type) and issubclass(value, BaseException) else None


_errors: Dict[int, Type[Error]] = {}
for _status, _name in _strata.status_names().items():
    if _status == 0:
        continue
    _cls_name = _class_name(_name)
    _cls = globals().get(_cls_name)
    if not (isinstance(_cls, type) and issubclass(_cls, Error)):  # a status new to this file
        _shadowed = _builtin_exception(_cls_name)
        _bases: Tuple[type, ...] = (Error,) if _shadowed is None else (Error, _shadowed)
        _cls = type(_cls_name, _bases, {"__doc__": f"{_name} from the C library."})
        globals()[_cls_name] = _cls
    if _builtin_exception(_cls_name) is None:  # a star import must not hide a built-in
        __all__.append(_cls_name)
    _errors[_status] = _cls
_strata._set_errors(Error, _errors)

# The C enums, by name: strata.h's names and values, from the C library.
_DTYPES: List[str] = _strata.enum_names("dtype")  # value -> name ("f32", "bf16", ...)
_DTYPE: Dict[str, int] = {name: code for code, name in enumerate(_DTYPES)}
_ELEMENT_BYTES: List[int] = _strata.dtype_sizes()  # value -> bytes of one element
_COLL: Dict[str, int] = {name: code for code, name in enumerate(_strata.enum_names("coll"))}
# Spellings the Python API takes beyond the C parsers' (None: the communicator's choice).
_PY_NAMES: Dict[str, Dict[Optional[str], str]] = {
    "op": {"product": "prod", "mean": "avg"},
    "algo": {None: "auto"},
    "compress": {None: "default"},
}


def _code(kind: EnumKind, value: Optional[str]) -> int:
    """The C value of a name of `kind` ("dtype", "op", "algo", "compress"), as the C library
    parses it (case aside): "float32", "f32" and "float" are all f32. ValueError if unknown."""
    key = value.lower() if isinstance(value, str) else value
    key = _PY_NAMES.get(kind, {}).get(key, key)
    code = _strata.enum_parse(kind, key) if isinstance(key, str) else -1
    if code < 0:
        names = ", ".join(_strata.enum_names(kind))
        raise ValueError(f"unknown {kind} {value!r} (one of: {names})")
    return code


def _is_torch(obj: object) -> bool:
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


_TORCH_DTYPES: Dict[str, int] = {
    f"torch.{t}": _DTYPE[c] for t, c in (
        ("int8", "i8"), ("uint8", "u8"), ("int16", "i16"), ("uint16", "u16"), ("int32", "i32"),
        ("int64", "i64"), ("float16", "f16"), ("bfloat16", "bf16"), ("float32", "f32"),
        ("float64", "f64"))}
# A buffer's struct format character -> its dtype (those whose size is fixed).
_FORMAT_DTYPES: Dict[str, int] = {"f": _DTYPE["f32"], "d": _DTYPE["f64"], "e": _DTYPE["f16"],
                                  "b": _DTYPE["i8"], "B": _DTYPE["u8"], "c": _DTYPE["u8"]}


def _format_dtype(view: memoryview) -> int:
    """The dtype code of a buffer's format, -1 if strata has none."""
    fmt = view.format.lstrip("@=<")
    if fmt in _FORMAT_DTYPES:
        return _FORMAT_DTYPES[fmt]
    if fmt in ("h", "H") and view.itemsize == 2:
        return _DTYPE["i16"] if fmt == "h" else _DTYPE["u16"]
    if fmt in ("i", "l", "q", "n") and view.itemsize in (4, 8):
        return _DTYPE["i32"] if view.itemsize == 4 else _DTYPE["i64"]
    if fmt in ("I", "L", "Q", "N") and view.itemsize in (4, 8):
        return _DTYPE["u32"] if view.itemsize == 4 else _DTYPE["u64"]
    return -1


def _describe(obj: Optional[BufferLike],
              dtype: Optional[str]) -> Tuple[_CArg, int, int, Optional[torch.Tensor]]:
    """(what to pass to C, dtype code or -1, element count, owner to keep alive)."""
    if obj is None:
        return None, -1, 0, None
    if _is_torch(obj):
        tensor: torch.Tensor = obj  # type: ignore[assignment]  # _is_torch: a torch.Tensor
        if tensor.device.type != "cpu":
            raise TypeError(f"strata moves CPU tensors only; this one is on {tensor.device}")
        if not tensor.is_contiguous():
            raise ValueError("the tensor is not contiguous (call .contiguous() first)")
        code = _TORCH_DTYPES.get(str(tensor.dtype))
        if code is None:
            raise TypeError(f"strata has no dtype for {tensor.dtype}")
        if dtype is not None and _code("dtype", dtype) != code:
            raise TypeError(f"dtype={dtype!r} does not match the tensor's {tensor.dtype}")
        return tensor.data_ptr(), code, tensor.numel(), tensor
    view = memoryview(obj)  # type: ignore[arg-type]  # not a tensor: a buffer, or TypeError
    if not view.c_contiguous:
        raise ValueError("the buffer is not C-contiguous (numpy: np.ascontiguousarray)")
    code = -1
    if dtype is not None:
        code = _code("dtype", dtype)
        size = _ELEMENT_BYTES[code]
        if view.itemsize not in (1, size) or view.nbytes % size:
            raise TypeError(f"dtype={dtype!r} does not fit a buffer of {view.itemsize}-byte items")
        return obj, code, view.nbytes // size, None  # type: ignore[return-value]  # a buffer
    code = _format_dtype(view)
    if code < 0:
        raise TypeError(f"a buffer of format {view.format!r} has no strata dtype (float16/32/64, "
                        "int8/16/32/64, uint8/16/32/64; give dtype='bf16' or 'f16' for 16-bit "
                        "float patterns)")
    return obj, code, view.nbytes // view.itemsize, None  # type: ignore[return-value]  # a buffer


class Comm(_strata.Comm):
    """A communicator: the ranks of one job.

    Comm() reads the environment (strata launch, torchrun, OpenMPI, Slurm), like
    strata_comm_init_env; with no launcher it is a world of one (rank 0 of 1). Keyword
    arguments set fields by the names of their STRATA_* variables, checked as the environment
    is: Comm(rank=0, world_size=2, addr="host:port", secret="...", timeout=60, tcp_streams=8,
    compress="bf16", ...). Use it as a context manager, or call destroy() on every rank.

    store: a rendezvous store the caller already runs, such as a torch.distributed Store (any
    object with set(key, bytes), get(key) -> bytes, add(key, n) -> int and wait([key],
    timedelta)), joined through as strata_comm_init_store does; the address settings are then
    unused. It must keep working as long as this communicator and those split from it live.

    Collectives take buffers (numpy arrays, bytearray, memoryview, CPU torch tensors) and work
    in place without `out`; async_op=True returns a strata.Request. Alone, this prints
    `1 [1. 1. 1. 1.]`; under `strata launch -n 4 python3 script.py` every rank prints
    `4 [10. 10. 10. 10.]`:

    >>> import numpy as np, strata
    >>> with strata.Comm() as comm:
    ...     x = np.full(4, comm.rank + 1, np.float32)
    ...     comm.allreduce(x)                       # in place: the sum over the ranks
    ...     req = comm.allreduce(x, op="max", async_op=True)
    ...     req.wait()
    ...     print(comm.size, x)
    1 [1. 1. 1. 1.]
    """

    def __init__(self, store: Optional[Union[StoreLike, TorchStore]] = None,
                 **settings: Setting) -> None:
        super().__init__({k: v for k, v in settings.items() if v is not None} or None, store)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.destroy()
        return False

    def __repr__(self) -> str:
        try:
            return f"<strata.Comm rank {self.rank} of {self.size}>"
        except ValueError:
            return "<strata.Comm destroyed>"

    def split(self, color: Optional[int], key: int = 0) -> Optional[Self]:
        """The ranks giving the same color >= 0 form a new communicator, numbered by key (ties
        by rank); color None or -1 takes part in none and gets None. Collective: every rank
        calls it, in the same order. Like MPI_Comm_split (torch's new_group)."""
        return self._split(-1 if color is None else color, key, type(self))

    # ---- elastic (docs/elastic.md) ----
    def shrink(self) -> Self:
        """Collective over the live ranks: they agree on who is alive and get a new Comm of
        those ranks (next epoch), numbered in their old order. Call it after an operation failed
        (a rank died or froze) or after revoke(); then destroy this one. A rank the others left
        out gets ExcludedError."""
        return self._shrink(type(self))

    def grow(self) -> Optional[Self]:
        """Collective over the members: admits every process waiting to join (started with
        STRATA_JOIN=1, or Comm(join=1)) and returns the new Comm (next epoch; members keep their
        ranks, joiners follow), or None when nobody waits."""
        return self._grow(type(self))

    def sync_shared(self, buffers: Mapping[str, BufferLike],
                    revision: int) -> _strata.SharedSyncInfo:
        """Shared state (docs/elastic.md): `buffers` maps names to writable contiguous arrays
        (numpy, or torch CPU tensors) with the same names and sizes on every rank. Afterwards
        every rank holds the bytes of the newest revision (the majority's among the ranks at it);
        a rank that differed (a joiner, one behind) pulled them. Returns a dict: revision (every
        rank's now), pulled, source, bytes_received, bytes_sent, ranks_in_majority."""
        names = list(buffers)
        views: List[Any] = []
        for name in names:
            b: Any = buffers[name]
            if hasattr(b, "detach") and hasattr(b, "numpy"):  # a torch tensor: its memory
                b = b.detach().numpy()
            views.append(b)
        return self._sync_shared(names, views, int(revision))

    # ---- the one path into C ----
    def _call(self, coll: str, send: Optional[BufferLike], recv: Optional[BufferLike],
              count_from: Callable[[int, int], int], op: str = "sum", root: int = 0,
              dtype: Optional[str] = None, algo: Optional[str] = None,
              compress: Optional[str] = None, async_op: bool = False,
              count: Optional[int] = None) -> Optional[Request]:
        s_arg, s_dtype, s_count, s_keep = _describe(send, dtype)
        if recv is send:
            r_arg, r_dtype, r_count, r_keep = s_arg, s_dtype, s_count, None
        else:
            r_arg, r_dtype, r_count, r_keep = _describe(recv, dtype)
        if s_dtype >= 0 and r_dtype >= 0 and s_dtype != r_dtype:
            raise TypeError(f"input and output dtypes differ ({_DTYPES[s_dtype]} and "
                            f"{_DTYPES[r_dtype]})")
        code = s_dtype if s_dtype >= 0 else r_dtype
        if count is None:
            count = count_from(s_count, r_count)
        keep = tuple(o for o in (s_keep, r_keep) if o is not None) or None
        return self.collective(_COLL[coll], s_arg, r_arg, count, code, _code("op", op), root,
                               _code("algo", algo), _code("compress", compress), async_op, keep)

    def _per_rank(self, total: int, what: str) -> int:
        if total % self.size:
            raise ValueError(f"{what} holds {total} elements, not a multiple of the "
                             f"{self.size} ranks")
        return total // self.size

    # ---- collectives: out=None means in place where the C API allows it ----
    # Each takes dtype= (a dtype name, for buffers whose format has none: "bf16"), algo=
    # ("ring", "rhd", "tree", "direct", "hier"; None: the communicator's), compress= (the
    # wire encoding; None: the communicator's), async_op= (return a Request) and count=.
    def allreduce(self, buf: BufferLike, out: Optional[BufferLike] = None, op: str = "sum",
                  **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Every rank's `buf` reduced elementwise (op: sum, prod, min, max, avg; band, bor,
        bxor for integer dtypes) into `out` (default: `buf`, in place) on every rank."""
        return self._call("allreduce", buf, buf if out is None else out,
                          lambda s, r: s, op=op, **kw)

    def reduce_scatter(self, buf: BufferLike, out: BufferLike, op: str = "sum",
                       **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """`buf` (size x n elements) reduced over ranks; rank r's `out` (n) gets block r."""
        return self._call("reduce_scatter", buf, out,
                          lambda s, r: self._per_rank(s, "the input"), op=op, **kw)

    def allgather(self, buf: BufferLike, out: BufferLike,
                  **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Each rank's `buf` (n) lands as block r of every rank's `out` (size x n)."""
        return self._call("allgather", buf, out, lambda s, r: s, **kw)

    def broadcast(self, buf: BufferLike, root: int = 0, out: Optional[BufferLike] = None,
                  **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """`root`'s `buf` copied into every rank's `out` (default: `buf`, in place)."""
        target = buf if out is None else out
        return self._call("broadcast", buf, target, lambda s, r: r, root=root, **kw)

    def reduce(self, buf: BufferLike, out: Optional[BufferLike] = None, root: int = 0,
               op: str = "sum", **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Every rank's `buf` reduced into `root`'s `out` (default: `buf`)."""
        return self._call("reduce", buf, buf if out is None else out,
                          lambda s, r: s, root=root, op=op, **kw)

    def gather(self, buf: BufferLike, out: Optional[BufferLike] = None, root: int = 0,
               **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Each rank's `buf` (n) lands as block r of `root`'s `out` (size x n; others: None)."""
        return self._call("gather", buf, out, lambda s, r: s, root=root, **kw)

    def scatter(self, buf: Optional[BufferLike], out: BufferLike, root: int = 0,
                **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Block r of `root`'s `buf` (size x n; others: None) lands in rank r's `out` (n)."""
        return self._call("scatter", buf, out, lambda s, r: r, root=root, **kw)

    def alltoall(self, buf: BufferLike, out: BufferLike,
                 **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Block j of rank i's `buf` (size x n) lands as block i of rank j's `out`."""
        return self._call("alltoall", buf, out,
                          lambda s, r: self._per_rank(s, "the input"), **kw)

    def barrier(self, async_op: bool = False) -> Optional[Request]:
        """Returns when every rank has entered it."""
        return self.collective(_COLL["barrier"], None, None, 0, _DTYPE["u8"], 0, 0, 0, 0,
                               async_op, None)

    def send(self, buf: BufferLike, peer: int,
             **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Send `buf` to rank `peer`; messages of a pair arrive in order."""
        return self._call("send", buf, None, lambda s, r: s, root=peer, **kw)

    def recv(self, buf: BufferLike, peer: int,
             **kw: Unpack[CollectiveOptions]) -> Optional[Request]:
        """Receive into `buf` from rank `peer` (the same count the peer sent)."""
        return self._call("recv", None, buf, lambda s, r: r, root=peer, **kw)


_DILOCO_DTYPES: Dict[str, int] = {"torch.float32": _DTYPE["f32"],
                                  "torch.bfloat16": _DTYPE["bf16"]}

def _diloco_param(index: int,
                  obj: DiLoCoParam) -> Tuple[_strata.DiLoCoArg, Optional[torch.Tensor]]:
    """One parameter as _strata.DiLoCo takes it, and its owner to keep alive (or None)."""
    if isinstance(obj, tuple) and len(obj) == 2:  # (buffer, dtype name): bf16 bits, say
        code = _code("dtype", obj[1])
        if code not in _DILOCO_DTYPES.values():
            raise TypeError(f"parameter {index}: DiLoCo takes float32 or bfloat16, not {obj[1]!r}")
        return (obj[0], code), None  # type: ignore[return-value]  # a buffer: C checks it
    if _is_torch(obj):
        tensor: torch.Tensor = obj  # type: ignore[assignment]  # _is_torch: a torch.Tensor
        if tensor.device.type != "cpu":
            raise TypeError(f"parameter {index} is on {tensor.device}; DiLoCo takes CPU tensors "
                            "only")
        if str(tensor.layout) != "torch.strided":
            raise TypeError(f"parameter {index} is a {tensor.layout} tensor; DiLoCo takes dense "
                            "ones")
        code_of = _DILOCO_DTYPES.get(str(tensor.dtype))
        if code_of is None:
            raise TypeError(f"parameter {index} is {tensor.dtype}; DiLoCo takes torch.float32 or "
                            "torch.bfloat16")
        if not tensor.is_contiguous():
            raise ValueError(f"parameter {index} is not contiguous (make it so before training: "
                             "strata updates the tensor's memory in place)")
        return (tensor.data_ptr(), tensor.numel(), code_of), tensor
    return obj, None  # type: ignore[return-value]  # a buffer: C checks it


class DiLoCo(_strata.DiLoCo):
    """DiLoCo / Streaming DiLoCo over parameter buffers: strata_diloco of strata.h.

    DiLoCo(comm, params, sync_every=100, outer_lr=0.7, outer_momentum=0.9, nesterov=True,
    fragments=1, delay=0, alpha=0.5, compress=None)

    params: a list of writable C-contiguous float32 buffers (numpy arrays), (buffer, "bf16")
    for bfloat16 bits in a 2-byte-item buffer, or CPU torch tensors (float32, bfloat16). They
    are the worker's own parameters (theta_local), read and written in place by step(); the
    object keeps them alive until close(). Collective: every rank creates it with the same
    shapes, and starts from rank 0's parameters. compress: the outer gradient's wire encoding
    (None = the communicator's; "none", "bf16", "f16", "int8", "fp8", "int4").

    Call step() after every inner optimizer step; it returns how many fragments it applied.
    outer_start(p)/outer_finish(p) run an outer step by hand instead. save() -> bytes and
    load(bytes) checkpoint the outer state (not the parameters). set_comm(comm) moves it to
    another communicator (the survivors', after a shrink). A worker that joins a running job
    creates it with comm=None and calls sync(comm) with its new communicator, while the members
    call sync(comm) with theirs (after comm.grow()): the joiner pulls theta_global, the momentum
    and the step counts. Use it as a context manager or call close(). strata.torch.DiLoCo
    wraps it for a torch model and optimizer.

    >>> import numpy as np, strata
    >>> comm = strata.Comm()                        # alone here: a world of one
    >>> w = np.zeros(1000, np.float32)              # the model's parameters
    >>> with strata.DiLoCo(comm, [w], sync_every=4, outer_lr=1.0, outer_momentum=0.0) as d:
    ...     for step in range(8):
    ...         w += 0.5                            # the inner optimizer's update
    ...         applied = d.step()                  # every 4th step: the outer one
    ...     print(d.inner_steps, d.outer_steps, w[0])
    8 2 4.0
    >>> comm.destroy()
    """

    def __init__(self, comm: Optional[Comm], params: Sequence[DiLoCoParam],
                 sync_every: int = 100, outer_lr: float = 0.7, outer_momentum: float = 0.9,
                 nesterov: bool = True, fragments: int = 1, delay: int = 0, alpha: float = 0.5,
                 compress: Optional[str] = None) -> None:
        described: List[_strata.DiLoCoArg] = []
        keep: List[torch.Tensor] = []
        for i, p in enumerate(params):
            arg, owner = _diloco_param(i, p)
            described.append(arg)
            if owner is not None:
                keep.append(owner)
        super().__init__(comm, described, int(sync_every), float(outer_lr),
                         float(outer_momentum), bool(nesterov), int(fragments), int(delay),
                         float(alpha), _code("compress", compress), tuple(keep))

    def __repr__(self) -> str:
        if self.closed:
            return "<strata.DiLoCo closed>"
        return (f"<strata.DiLoCo {self.fragments} fragment(s), {self.inner_steps} inner and "
                f"{self.outer_steps} outer steps>")
