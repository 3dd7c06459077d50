"""Memory for a window's columns: mapped page by page as it is first written."""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["window_memory"]

SMALL = 1 << 20  # below this, ordinary heap memory


def window_memory(nbytes: int) -> np.ndarray:
    """``nbytes`` of new memory (uint8) for a window's column, in ordinary pages.

    numpy asks the kernel for huge pages for large arrays; where the kernel then
    compacts memory to find them as they are first touched (``defrag=madvise``), writing
    a window of 1.2 GB took about 1.5 CPU s more of kernel time than in ordinary pages
    on the 2-core benchmark machine. Units are written one after the other, so ordinary
    pages are mapped in order, cheaply."""
    if nbytes < SMALL:
        return np.empty(nbytes, dtype=np.uint8)
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS), dtype=np.uint8)
