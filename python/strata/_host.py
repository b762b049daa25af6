# SPDX-License-Identifier: Apache-2.0
"""The host copies through which strata moves tensors that live on a device (a GPU): the torch
backend's staging aside (C++), DiLoCo's parameter mirrors, strata.weights' and strata.kv's
buffers. torch is imported here only when a tensor is given, so the package imports without it.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

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
