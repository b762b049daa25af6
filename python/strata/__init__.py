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

from . import _strata

__version__ = _strata.version()
__all__ = ["Comm", "Request", "DiLoCo", "Error", "__version__"]

Request = _strata.Request


class Error(Exception):
    """A strata call failed: .status (the negative C code), .name (STRATA_ERR_...), .message."""

    def __init__(self, status, name, message):
        super().__init__(f"{name}: {message}")
        self.status, self.name, self.message = status, name, message


def _class_name(status_name):
    words = status_name.replace("STRATA_ERR_", "").lower().split("_")
    return "".join(w.capitalize() for w in words) + "Error"


_errors = {}
for _status, _name in _strata.status_names().items():
    if _status == 0:
        continue
    _cls = type(_class_name(_name), (Error,), {"__doc__": f"{_name} from the C library."})
    globals()[_cls.__name__] = _cls
    __all__.append(_cls.__name__)
    _errors[_status] = _cls
_strata._set_errors(Error, _errors)

# The C enums, in strata.h's order.
_COLLS = ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce", "gather",
          "scatter", "alltoall", "barrier", "send", "recv"]
_COLL = {name: i for i, name in enumerate(_COLLS)}
_DTYPES = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
           "float32", "float64", "int16", "uint16"]
_DTYPE = {name: i for i, name in enumerate(_DTYPES)}
_DTYPE.update({"i8": 0, "u8": 1, "i32": 2, "u32": 3, "i64": 4, "u64": 5, "f16": 6, "half": 6,
               "bf16": 7, "f32": 8, "float": 8, "f64": 9, "double": 9, "i16": 10, "short": 10,
               "u16": 11})
_OPS = {"sum": 0, "prod": 1, "product": 1, "min": 2, "max": 3, "avg": 4, "mean": 4, "band": 5,
        "bor": 6, "bxor": 7}
_ALGOS = {None: 0, "auto": 0, "ring": 1, "rhd": 2, "tree": 3, "direct": 4, "hier": 5}
_COMPRESS = {None: 0, "default": 0, "none": 1, "bf16": 2, "f16": 3, "int8": 4, "fp8": 5,
             "int4": 6}
_ELEMENT_BYTES = [1, 1, 4, 4, 8, 8, 2, 2, 4, 8, 2, 2]


def _choice(table, value, what):
    key = value.lower() if isinstance(value, str) else value
    if key not in table:
        names = ", ".join(sorted(k for k in table if isinstance(k, str)))
        raise ValueError(f"unknown {what} {value!r} (one of: {names})")
    return table[key]


def _is_torch(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


_TORCH_DTYPES = {"torch.int8": 0, "torch.uint8": 1, "torch.int32": 2, "torch.int64": 4,
                 "torch.float16": 6, "torch.bfloat16": 7, "torch.float32": 8,
                 "torch.float64": 9, "torch.int16": 10, "torch.uint16": 11}


def _format_dtype(view):
    """The dtype code of a buffer's format, -1 if strata has none."""
    fmt = view.format.lstrip("@=<")
    if fmt in ("f", "d", "e", "b", "B", "c"):
        return {"f": 8, "d": 9, "e": 6, "b": 0, "B": 1, "c": 1}[fmt]
    if fmt in ("h", "H") and view.itemsize == 2:
        return 10 if fmt == "h" else 11
    if fmt in ("i", "l", "q", "n") and view.itemsize in (4, 8):
        return 2 if view.itemsize == 4 else 4
    if fmt in ("I", "L", "Q", "N") and view.itemsize in (4, 8):
        return 3 if view.itemsize == 4 else 5
    return -1


def _describe(obj, dtype):
    """(what to pass to C, dtype code or -1, element count, owner to keep alive)."""
    if obj is None:
        return None, -1, 0, None
    if _is_torch(obj):
        if obj.device.type != "cpu":
            raise TypeError(f"strata moves CPU tensors only; this one is on {obj.device}")
        if not obj.is_contiguous():
            raise ValueError("the tensor is not contiguous (call .contiguous() first)")
        code = _TORCH_DTYPES.get(str(obj.dtype))
        if code is None:
            raise TypeError(f"strata has no dtype for {obj.dtype}")
        if dtype is not None and _choice(_DTYPE, dtype, "dtype") != code:
            raise TypeError(f"dtype={dtype!r} does not match the tensor's {obj.dtype}")
        return obj.data_ptr(), code, obj.numel(), obj
    view = memoryview(obj)
    if not view.c_contiguous:
        raise ValueError("the buffer is not C-contiguous (numpy: np.ascontiguousarray)")
    code = -1
    if dtype is not None:
        code = _choice(_DTYPE, dtype, "dtype")
        if view.itemsize not in (1, _ELEMENT_BYTES[code]) or view.nbytes % _ELEMENT_BYTES[code]:
            raise TypeError(f"dtype={dtype!r} does not fit a buffer of {view.itemsize}-byte items")
        return obj, code, view.nbytes // _ELEMENT_BYTES[code], None
    code = _format_dtype(view)
    if code < 0:
        raise TypeError(f"a buffer of format {view.format!r} has no strata dtype (float16/32/64, "
                        "int8/16/32/64, uint8/16/32/64; give dtype='bf16' or 'f16' for 16-bit "
                        "float patterns)")
    return obj, code, view.nbytes // view.itemsize, None


class Comm(_strata.Comm):
    """A communicator: the ranks of one job.

    Comm() reads the environment (strata launch, torchrun, OpenMPI, Slurm), like
    strata_comm_init_env. Keyword arguments set fields by the names of their STRATA_*
    variables, checked as the environment is: Comm(rank=0, world_size=2, addr="host:port",
    secret="...", timeout=60, tcp_streams=8, compress="bf16", ...). Use it as a context manager,
    or call destroy() on every rank.

    store: a rendezvous store the caller already runs, such as a torch.distributed Store (any
    object with set(key, bytes), get(key) -> bytes, add(key, n) -> int and wait([key],
    timedelta)), joined through as strata_comm_init_store does; the address settings are then
    unused. It must keep working as long as this communicator and those split from it live.
    """

    def __init__(self, store=None, **settings):
        super().__init__({k: v for k, v in settings.items() if v is not None} or None, store)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy()
        return False

    def __repr__(self):
        try:
            return f"<strata.Comm rank {self.rank} of {self.size}>"
        except ValueError:
            return "<strata.Comm destroyed>"

    def split(self, color, key=0):
        """The ranks giving the same color >= 0 form a new communicator, numbered by key (ties
        by rank); color None or -1 takes part in none and gets None. Collective: every rank
        calls it, in the same order. Like MPI_Comm_split (torch's new_group)."""
        return self._split(-1 if color is None else color, key, type(self))

    # ---- elastic (docs/elastic.md) ----
    def shrink(self):
        """Collective over the live ranks: they agree on who is alive and get a new Comm of
        those ranks (next epoch), numbered in their old order. Call it after an operation failed
        (a rank died or froze) or after revoke(); then destroy this one. A rank the others left
        out gets ExcludedError."""
        return self._shrink(type(self))

    def grow(self):
        """Collective over the members: admits every process waiting to join (started with
        STRATA_JOIN=1, or Comm(join=1)) and returns the new Comm (next epoch; members keep their
        ranks, joiners follow), or None when nobody waits."""
        return self._grow(type(self))

    def sync_shared(self, buffers, revision):
        """Shared state (docs/elastic.md): `buffers` maps names to writable contiguous arrays
        (numpy, or torch CPU tensors) with the same names and sizes on every rank. Afterwards
        every rank holds the bytes of the newest revision (the majority's among the ranks at it);
        a rank that differed (a joiner, one behind) pulled them. Returns a dict: revision (every
        rank's now), pulled, source, bytes_received, bytes_sent, ranks_in_majority."""
        names = list(buffers)
        views = []
        for name in names:
            b = buffers[name]
            if hasattr(b, "detach") and hasattr(b, "numpy"):  # a torch tensor: its memory
                b = b.detach().numpy()
            views.append(b)
        return self._sync_shared(names, views, int(revision))

    # ---- the one path into C ----
    def _call(self, coll, send, recv, count_from, op="sum", root=0, dtype=None, algo=None,
              compress=None, async_op=False, count=None):
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
        return self.collective(_COLL[coll], s_arg, r_arg, count, code,
                               _choice(_OPS, op, "op"), root, _choice(_ALGOS, algo, "algo"),
                               _choice(_COMPRESS, compress, "compress"), async_op, keep)

    def _per_rank(self, total, what):
        if total % self.size:
            raise ValueError(f"{what} holds {total} elements, not a multiple of the "
                             f"{self.size} ranks")
        return total // self.size

    # ---- collectives: out=None means in place where the C API allows it ----
    def allreduce(self, buf, out=None, op="sum", **kw):
        """Every rank's `buf` reduced elementwise (op: sum, prod, min, max, avg; band, bor, bxor
        for integer dtypes) into `out` (default: `buf`, in place) on every rank."""
        return self._call("allreduce", buf, buf if out is None else out,
                          lambda s, r: s, op=op, **kw)

    def reduce_scatter(self, buf, out, op="sum", **kw):
        """`buf` (size x n elements) reduced over ranks; rank r's `out` (n) gets block r."""
        return self._call("reduce_scatter", buf, out,
                          lambda s, r: self._per_rank(s, "the input"), op=op, **kw)

    def allgather(self, buf, out, **kw):
        """Each rank's `buf` (n) lands as block r of every rank's `out` (size x n)."""
        return self._call("allgather", buf, out, lambda s, r: s, **kw)

    def broadcast(self, buf, root=0, out=None, **kw):
        """`root`'s `buf` copied into every rank's `out` (default: `buf`, in place)."""
        target = buf if out is None else out
        return self._call("broadcast", buf, target, lambda s, r: r, root=root, **kw)

    def reduce(self, buf, out=None, root=0, op="sum", **kw):
        """Every rank's `buf` reduced into `root`'s `out` (default: `buf`)."""
        return self._call("reduce", buf, buf if out is None else out,
                          lambda s, r: s, root=root, op=op, **kw)

    def gather(self, buf, out=None, root=0, **kw):
        """Each rank's `buf` (n) lands as block r of `root`'s `out` (size x n; others: None)."""
        return self._call("gather", buf, out, lambda s, r: s, root=root, **kw)

    def scatter(self, buf, out, root=0, **kw):
        """Block r of `root`'s `buf` (size x n; others: None) lands in rank r's `out` (n)."""
        return self._call("scatter", buf, out, lambda s, r: r, root=root, **kw)

    def alltoall(self, buf, out, **kw):
        """Block j of rank i's `buf` (size x n) lands as block i of rank j's `out`."""
        return self._call("alltoall", buf, out,
                          lambda s, r: self._per_rank(s, "the input"), **kw)

    def barrier(self, async_op=False):
        """Returns when every rank has entered it."""
        return self.collective(_COLL["barrier"], None, None, 0, _DTYPE["uint8"], 0, 0, 0, 0,
                               async_op, None)

    def send(self, buf, peer, **kw):
        """Send `buf` to rank `peer`; messages of a pair arrive in order."""
        return self._call("send", buf, None, lambda s, r: s, root=peer, **kw)

    def recv(self, buf, peer, **kw):
        """Receive into `buf` from rank `peer` (the same count the peer sent)."""
        return self._call("recv", None, buf, lambda s, r: r, root=peer, **kw)


_DILOCO_DTYPES = {"torch.float32": 8, "torch.bfloat16": 7}


def _diloco_param(index, obj):
    """One parameter as _strata.DiLoCo takes it, and its owner to keep alive (or None)."""
    if isinstance(obj, tuple) and len(obj) == 2:  # (buffer, dtype name): bf16 bits, say
        code = _choice(_DTYPE, obj[1], "dtype")
        if code not in (7, 8):
            raise TypeError(f"parameter {index}: DiLoCo takes float32 or bfloat16, not {obj[1]!r}")
        return (obj[0], code), None
    if _is_torch(obj):
        if obj.device.type != "cpu":
            raise TypeError(f"parameter {index} is on {obj.device}; DiLoCo takes CPU tensors only")
        if str(obj.layout) != "torch.strided":
            raise TypeError(f"parameter {index} is a {obj.layout} tensor; DiLoCo takes dense ones")
        code = _DILOCO_DTYPES.get(str(obj.dtype))
        if code is None:
            raise TypeError(f"parameter {index} is {obj.dtype}; DiLoCo takes torch.float32 or "
                            "torch.bfloat16")
        if not obj.is_contiguous():
            raise ValueError(f"parameter {index} is not contiguous (make it so before training: "
                             "strata updates the tensor's memory in place)")
        return (obj.data_ptr(), obj.numel(), code), obj
    return obj, None


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
    and the step counts. Use it as a context manager or call close().
    """

    def __init__(self, comm, params, sync_every=100, outer_lr=0.7, outer_momentum=0.9,
                 nesterov=True, fragments=1, delay=0, alpha=0.5, compress=None):
        described, keep = [], []
        for i, p in enumerate(params):
            arg, owner = _diloco_param(i, p)
            described.append(arg)
            if owner is not None:
                keep.append(owner)
        super().__init__(comm, described, int(sync_every), float(outer_lr),
                         float(outer_momentum), bool(nesterov), int(fragments), int(delay),
                         float(alpha), _choice(_COMPRESS, compress, "compress"), tuple(keep))

    def __repr__(self):
        if self.closed:
            return "<strata.DiLoCo closed>"
        return (f"<strata.DiLoCo {self.fragments} fragment(s), {self.inner_steps} inner and "
                f"{self.outer_steps} outer steps>")
