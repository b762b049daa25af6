# SPDX-License-Identifier: Apache-2.0
"""RL weight sync: a trainer publishes versions of named tensors, rollout workers update to them.

strata_weights of strata.h (docs/weights.md). Rank 0 of a communicator publishes, every other
rank subscribes; a round is collective over the communicator:

    # trainer (rank 0)                         # rollout worker (rank r > 0)
    pub = Publisher(model.state_dict())        sub = Subscriber(model.state_dict())
    for step in ...:                           while ...:
        train_step()                               info = sub.update(comm)   # newest version
        pub.publish()                              rollouts()
        pub.serve(comm)

Tensors: a dict name -> tensor, or a list of (name, tensor). A tensor is a contiguous torch
tensor (bfloat16, float16, float32: bf16 goes by its storage bytes) on any device (one not on
the CPU is staged through a pinned host copy: publish() copies it there, update() back once a
version passed its check) or a C-contiguous
writable numpy array (float16, float32; bf16 bits as (uint16 array, "bf16")). The handle reads
(publisher) or writes (subscriber) their memory in place and keeps them alive until close().

Versions are sent as a full copy or a zstd-compressed sparse patch (indices + new values of the
elements whose bits changed), whichever is smaller, with a full anchor every anchor_every
versions; every tensor is checked against the publisher's xxHash3 digest before a subscriber's
buffers change. Errors raise strata.Error subclasses: MismatchError (the tensor sets differ; the
message names the tensor), ProtocolError (a version failed its check: the previous one is
kept), NotFoundError, and the transport errors (PeerLostError, RevokedError, ...) after which
the survivors shrink the communicator and repeat the round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, List, Mapping, Tuple, Union, cast

from . import _DTYPE, _ELEMENT_BYTES, _code, _is_torch, _strata
from ._host import host_copy

if TYPE_CHECKING:
    import numpy
    import torch
    from typing_extensions import Literal, Self, TypeAlias

    #: One tensor: a torch tensor, a numpy array, or (uint16 array, "bf16") for bf16 bits.
    Tensor: TypeAlias = Union[torch.Tensor, "numpy.ndarray[Any, Any]",
                              Tuple["numpy.ndarray[Any, Any]", str]]
    #: The tensors of a handle: a dict name -> tensor (a state_dict), or (name, tensor) pairs.
    Tensors: TypeAlias = Union[Mapping[str, Tensor], Iterable[Tuple[str, Tensor]]]

__all__ = ["Publisher", "Subscriber", "NEWEST"]

NEWEST = 0

_TORCH = {"torch.bfloat16": _DTYPE["bf16"], "torch.float16": _DTYPE["f16"],
          "torch.float32": _DTYPE["f32"]}
_NUMPY = {"float16": _DTYPE["f16"], "float32": _DTYPE["f32"]}


def _tensor(name: str, obj: Tensor) -> Tuple[_strata.WeightsArg, Any]:
    """(name, address, bytes, dtype code, shape) and the owner to keep alive."""
    dtype = None
    if isinstance(obj, tuple) and len(obj) == 2:
        obj, dtype = obj
    if _is_torch(obj):
        tensor: torch.Tensor = obj  # type: ignore[assignment]  # _is_torch: a torch.Tensor
        if tensor.device.type == "meta":
            raise TypeError(f"tensor {name!r} is on the meta device: it holds no values")
        if not tensor.is_contiguous():
            raise ValueError(f"tensor {name!r} is not contiguous")
        code = _TORCH.get(str(tensor.dtype))
        if code is None:
            raise TypeError(f"tensor {name!r} is {tensor.dtype}; bfloat16, float16 or float32 "
                            "expected")
        if _staged_device(tensor):  # through a pinned host copy: publish() and update() sync it
            tensor = host_copy(tensor)
        return (name, tensor.data_ptr(), tensor.numel() * tensor.element_size(), code,
                tuple(tensor.shape)), tensor
    interface = getattr(obj, "__array_interface__", None)
    if interface is None:
        raise TypeError(f"tensor {name!r}: a torch tensor or a numpy array expected, not "
                        f"{type(obj).__name__}")
    array: numpy.ndarray[Any, Any] = obj  # type: ignore[assignment]  # has __array_interface__
    if not array.flags["C_CONTIGUOUS"] or not array.flags["WRITEABLE"]:
        raise ValueError(f"tensor {name!r} must be C-contiguous and writable")
    if dtype is not None:
        code = _code("dtype", dtype)
        if code not in _TORCH.values() or array.itemsize != _ELEMENT_BYTES[code]:
            raise TypeError(f"tensor {name!r}: dtype {dtype!r} does not fit {array.dtype} items")
    else:
        code = _NUMPY.get(str(array.dtype))
        if code is None:
            raise TypeError(f"tensor {name!r} is {array.dtype}; float16 or float32 expected (bf16 "
                            "bits: (uint16 array, 'bf16'))")
    return (name, interface["data"][0], array.nbytes, code, tuple(array.shape)), array


def _staged_device(tensor: torch.Tensor) -> bool:
    """Whether a tensor goes through a host copy (tests replace this to run that path here)."""
    return tensor.device.type != "cpu"


def _tensors(tensors: Tensors) -> Tuple[List[_strata.WeightsArg], Tuple[Any, ...],
                                        List[Tuple[torch.Tensor, torch.Tensor]]]:
    """The C description of the tensors, what to keep alive, and the (device tensor, host copy)
    pairs of the tensors not on the CPU."""
    items: Iterable[Tuple[str, Tensor]] = (
        cast("Mapping[str, Tensor]", tensors).items() if hasattr(tensors, "items") else tensors)
    described: List[_strata.WeightsArg] = []
    keep: List[Any] = []
    staged: List[Tuple[torch.Tensor, torch.Tensor]] = []
    for name, obj in items:
        arg, owner = _tensor(str(name), obj)
        described.append(arg)
        keep.append(owner)
        device = obj[0] if isinstance(obj, tuple) else obj
        if owner is not device:  # a device tensor and its host copy
            staged.append((cast("torch.Tensor", device), owner))
    return described, tuple(keep), staged


_EXAMPLE = """
    >>> import numpy as np, strata
    >>> from strata.weights import Publisher, Subscriber
    >>> w = np.zeros(1024, np.float32)              # a model's tensor, on every rank
    >>> with strata.Comm() as comm:                 # alone here; or strata launch -n 3
    ...     if comm.rank == 0:                      # the trainer publishes
    ...         with Publisher({"w": w}) as pub:
    ...             w += 1                          # a training step
    ...             version = pub.publish()
    ...             info = pub.serve(comm)          # a round: the subscribers get it
    ...     else:                                   # the rollout workers subscribe
    ...         with Subscriber({"w": w}) as sub:
    ...             info = sub.update(comm)         # the newest version; w changes in place
    ...     print(info["version"], w[0])
    1 1.0
"""


class Publisher(_strata.Weights):
    __doc__ = """Publisher(tensors, anchor_every=16, history=32, zstd_level=1, chunk_bytes=8 << 20)

    publish() -> version encodes the tensors' current bytes (local); serve(comm) -> info runs
    the publisher's side of a round (rank 0). version_info(v) -> dict of what v cost: anchor,
    elements, changed, full_bytes, patch_bytes, patch_raw_bytes, encode_s, hash_s.
    prepare(comm, warm_bytes=None) -> info, optional, on every rank before the first round:
    checks the subscribers' tensor sets now, draws the fan-out tree and opens the TCP windows of
    its edges between sites, so the first version crosses the WAN at the link's rate
    (docs/weights.md); info: parent, children, refused, warm_bytes_sent, warm_bytes_received,
    seconds. Use it as a context manager or call close().
""" + _EXAMPLE

    def __init__(self, tensors: Tensors, anchor_every: int = 16, history: int = 32,
                 zstd_level: int = 1, chunk_bytes: int = 8 << 20) -> None:
        described, keep, self._staged = _tensors(tensors)
        super().__init__(True, described, int(anchor_every), int(history), int(zstd_level),
                         int(chunk_bytes), keep)

    def publish(self) -> int:
        """Encode the tensors' current values as the next version (device tensors are copied
        to their host copies first); returns its number."""
        for device, host in self._staged:
            host.copy_(device)
        return super().publish()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False


class Subscriber(_strata.Weights):
    __doc__ = """Subscriber(tensors): update(comm, target=NEWEST) -> info brings the tensors to a
    version (the newest, or a number) and forwards the round's bytes down the fan-out; `version`
    is the one held (0 = none yet). The tensors change only once the whole version passed its
    check. prepare(comm, warm_bytes=None) -> info: the subscriber's side of Publisher.prepare.
    Use it as a context manager or call close().
""" + _EXAMPLE

    def __init__(self, tensors: Tensors) -> None:
        described, keep, self._staged = _tensors(tensors)
        super().__init__(False, described, keep=keep)

    def update(self, comm: _strata.Comm, target: int = NEWEST) -> _strata.RoundInfo:
        """Bring the tensors to a version (the newest, or a number); device tensors get it from
        their host copies once the whole version passed its check."""
        held = self.version
        info = super().update(comm, target)
        if self.version != held:
            for device, host in self._staged:
                device.copy_(host)
        return info

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> Literal[False]:
        self.close()
        return False
