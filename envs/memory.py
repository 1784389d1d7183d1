"""Large read-mostly CPU tables on transparent huge pages (the env's observation template table).

Why (the measurements: docs/benchmarks.md): an env step gathers one row per env from tables of tens
of MB (the observation template table, the open and close prices), rows scattered over the whole
table. With 4 KiB pages nearly every row costs a TLB miss, and under virtualization a page walk is
expensive; on 2 MiB pages the same gather measured faster (the table is built anyway, so mapping it
this way costs nothing). Linux only grants huge pages to a mapping that asks for them
(``madvise`` mode, the default here), and torch's allocator does not ask unless
``THP_MEM_ALLOC_ENABLE=1`` is set before it starts, so these tables are mapped by hand. Anywhere else (other OS, a GPU, a small table, a
refusal) this is a plain ``torch.empty``.
"""

from __future__ import annotations

import mmap
import sys

import numpy as np
import torch

_HUGE = 2 << 20  # 2 MiB, x86-64 and arm64 transparent huge pages
MIN_BYTES = 4 * _HUGE  # below this the TLB covers the table anyway


def applies(nbytes: int, device: torch.device | str = "cpu") -> bool:
    """Whether :func:`table_empty` would ask for huge pages for a table of ``nbytes`` on ``device``."""
    return torch.device(device).type == "cpu" and sys.platform.startswith("linux") and nbytes >= MIN_BYTES


def table_empty(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | str = "cpu"
) -> torch.Tensor:
    """An uninitialized contiguous tensor; on Linux CPU and from :data:`MIN_BYTES` on, backed by
    memory advised for transparent huge pages. Freed with the tensor."""
    device = torch.device(device)
    itemsize = torch.empty((), dtype=dtype).element_size()
    nbytes = int(np.prod(shape)) * itemsize
    if not applies(nbytes, device):
        return torch.empty(shape, dtype=dtype, device=device)
    try:
        region = mmap.mmap(-1, nbytes + _HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        region.madvise(mmap.MADV_HUGEPAGE)
    except (OSError, AttributeError, ValueError):
        return torch.empty(shape, dtype=dtype, device=device)
    raw = np.frombuffer(region, dtype=np.uint8)  # keeps the mapping alive as long as any view of it
    start = (-raw.ctypes.data) % _HUGE  # align to a huge page boundary
    return torch.from_numpy(raw[start : start + nbytes]).view(dtype).view(shape)
