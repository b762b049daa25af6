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

from . import _strata, _choice, _DTYPE, _ELEMENT_BYTES, _is_torch

__all__ = ["Publisher", "Subscriber", "NEWEST"]

NEWEST = 0

_TORCH = {"torch.bfloat16": 7, "torch.float16": 6, "torch.float32": 8}
_NUMPY = {"float16": 6, "float32": 8}


def _tensor(name, obj):
    """(name, address, bytes, dtype code, shape) and the owner to keep alive."""
    dtype = None
    if isinstance(obj, tuple) and len(obj) == 2:
        obj, dtype = obj
    if _is_torch(obj):
        if obj.device.type == "meta":
            raise TypeError(f"tensor {name!r} is on the meta device: it holds no values")
        if not obj.is_contiguous():
            raise ValueError(f"tensor {name!r} is not contiguous")
        code = _TORCH.get(str(obj.dtype))
        if code is None:
            raise TypeError(f"tensor {name!r} is {obj.dtype}; bfloat16, float16 or float32 expected")
        if _staged_device(obj):  # through a pinned host copy: publish() and update() sync it
            obj = _pinned_copy(obj)
        return (name, obj.data_ptr(), obj.numel() * obj.element_size(), code,
                tuple(obj.shape)), obj
    interface = getattr(obj, "__array_interface__", None)
    if interface is None:
        raise TypeError(f"tensor {name!r}: a torch tensor or a numpy array expected, not "
                        f"{type(obj).__name__}")
    if not obj.flags["C_CONTIGUOUS"] or not obj.flags["WRITEABLE"]:
        raise ValueError(f"tensor {name!r} must be C-contiguous and writable")
    if dtype is not None:
        code = _choice(_DTYPE, dtype, "dtype")
        if code not in (6, 7, 8) or obj.itemsize != _ELEMENT_BYTES[code]:
            raise TypeError(f"tensor {name!r}: dtype {dtype!r} does not fit {obj.dtype} items")
    else:
        code = _NUMPY.get(str(obj.dtype))
        if code is None:
            raise TypeError(f"tensor {name!r} is {obj.dtype}; float16 or float32 expected (bf16 "
                            "bits: (uint16 array, 'bf16'))")
    return (name, interface["data"][0], obj.nbytes, code, tuple(obj.shape)), obj


def _staged_device(tensor):
    """Whether a tensor goes through a host copy (tests replace this to run that path here)."""
    return tensor.device.type != "cpu"


def _pinned_copy(tensor):
    import torch
    try:
        host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
    except RuntimeError:  # no accelerator that pins
        host = torch.empty(tensor.shape, dtype=tensor.dtype)
    host.copy_(tensor)
    return host


def _tensors(tensors):
    """The C description of the tensors, what to keep alive, and the (device tensor, host copy)
    pairs of the tensors not on the CPU."""
    items = tensors.items() if hasattr(tensors, "items") else tensors
    described, keep, staged = [], [], []
    for name, obj in items:
        arg, owner = _tensor(str(name), obj)
        described.append(arg)
        keep.append(owner)
        device = obj[0] if isinstance(obj, tuple) else obj
        if owner is not device:
            staged.append((device, owner))
    return described, tuple(keep), staged


class Publisher(_strata.Weights):
    """Publisher(tensors, anchor_every=16, history=32, zstd_level=1, chunk_bytes=8 << 20)

    publish() -> version encodes the tensors' current bytes (local); serve(comm) -> info runs
    the publisher's side of a round (rank 0). version_info(v) -> dict of what v cost: anchor,
    elements, changed, full_bytes, patch_bytes, patch_raw_bytes, encode_s, hash_s.
    prepare(comm, warm_bytes=None) -> info, optional, on every rank before the first round:
    checks the subscribers' tensor sets now, draws the fan-out tree and opens the TCP windows of
    its edges between sites, so the first version crosses the WAN at the link's rate
    (docs/weights.md); info: parent, children, refused, warm_bytes_sent, warm_bytes_received,
    seconds.
    """

    def __init__(self, tensors, anchor_every=16, history=32, zstd_level=1, chunk_bytes=8 << 20):
        described, keep, self._staged = _tensors(tensors)
        super().__init__(True, described, int(anchor_every), int(history), int(zstd_level),
                         int(chunk_bytes), keep)

    def publish(self):
        """Encode the tensors' current values as the next version (device tensors are copied
        to their host copies first); returns its number."""
        for device, host in self._staged:
            host.copy_(device)
        return super().publish()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


class Subscriber(_strata.Weights):
    """Subscriber(tensors): update(comm, target=NEWEST) -> info brings the tensors to a version
    (the newest, or a number) and forwards the round's bytes down the fan-out; `version` is the
    one held (0 = none yet). The tensors change only once the whole version passed its check.
    prepare(comm, warm_bytes=None) -> info: the subscriber's side of Publisher.prepare.
    """

    def __init__(self, tensors):
        described, keep, self._staged = _tensors(tensors)
        super().__init__(False, described, keep=keep)

    def update(self, comm, target=NEWEST):
        """Bring the tensors to a version (the newest, or a number); device tensors get it from
        their host copies once the whole version passed its check."""
        held = self.version
        info = super().update(comm, target)
        if self.version != held:
            for device, host in self._staged:
                device.copy_(host)
        return info

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
