# SPDX-License-Identifier: Apache-2.0
"""The host copies through which strata moves tensors that live on a device (a GPU): the torch
backend's staging aside (C++), DiLoCo's parameter mirrors, strata.weights' and strata.kv's
buffers. torch is imported here only when a tensor is given, so the package imports without it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, List, Sequence, Tuple

if TYPE_CHECKING:
    import torch


def host_copy(tensor: torch.Tensor) -> torch.Tensor:
    """A host tensor holding `tensor`'s values, pinned when it is on a device that can pin
    (copies to and from pinned memory are the fast, asynchronous kind)."""
    import torch
    try:
        host = torch.empty(tensor.shape, dtype=tensor.dtype,
                           pin_memory=tensor.device.type != "cpu")
    except RuntimeError:  # no accelerator that pins
        host = torch.empty(tensor.shape, dtype=tensor.dtype)
    with torch.no_grad():
        host.copy_(tensor)
    return host


def copy_mirrored(dst: Sequence[torch.Tensor], src: Sequence[torch.Tensor],
                  indices: Iterable[int]) -> None:
    """dst[i] <- src[i] for each index whose two are not one tensor (a device tensor and its
    host mirror; a CPU tensor is its own)."""
    import torch
    with torch.no_grad():
        for i in indices:
            if dst[i] is not src[i]:
                dst[i].copy_(src[i])


def diloco_due(step: int, sync_every: int, fragments: int,
               delay: int) -> Tuple[List[int], List[int]]:
    """The fragments strata_diloco_step's inner step `step` starts and applies (the schedule of
    src/train/diloco.c: fragment f starts when step % H == f * H // P, applies `delay` later):
    the ones whose mirrors must be fresh on the host before, and back on the device after."""
    starts = [f for f in range(fragments) if step % sync_every == f * sync_every // fragments]
    before = step - delay
    applies = [f for f in range(fragments)
               if before >= 1 and before % sync_every == f * sync_every // fragments]
    return starts, applies
