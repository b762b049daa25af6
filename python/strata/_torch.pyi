# SPDX-License-Identifier: Apache-2.0
"""Types of strata._torch, the torch.distributed backend "strata" (python/strata/_torch.cpp)."""
from datetime import timedelta

from torch._C._distributed_c10d import Store
from torch._C._distributed_c10d import Backend as _Backend

def create_backend(store: Store, rank: int, world_size: int,
                   timeout: timedelta) -> _Backend: ...
def version() -> str: ...
def _runtime_id() -> int: ...
