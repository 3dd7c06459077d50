"""Memory for the columns of a plain tar's batches, used again once Arrow lets it go.

Reading members into new memory for every batch costs more than the copy itself: the
kernel maps and zeroes each page of it on first touch. numpy's own arrays of this size
were also backed by huge pages (numpy asks for them), each zeroed whole on its first
fault: on the 2 GB tar benchmark that zeroing was a quarter to a third of all the CPU
time of a 2-worker DataLoader epoch. So the memory comes from Arrow's allocator (jemalloc
in a DataLoader worker, which keeps freed pages for the next allocations, ordinary
pages) and is pooled: each batch's column buffer is a view of a pooled array; a weak
reference to the view gives the array back to the pool when the view dies, which is when
the last Arrow buffer made from it is freed (``pa.py_buffer`` holds the view, and
everything made from that buffer holds the buffer). An array is never handed out while
anything can still read it. At most :data:`KEEP_BYTES` of free arrays are kept per
process; beyond that they go back to the allocator.
"""

from __future__ import annotations

import os
import threading
import weakref

import numpy as np
import pyarrow as pa

__all__ = ["KEEP_BYTES", "POOL", "BufferPool"]

KEEP_BYTES = 128 * 2**20  # free memory kept for the next batches, per process
MIN_BYTES = 256 * 2**10  # smaller buffers come from the allocator as before


class BufferPool:
    """Free arrays of bytes, each given out as a view of the size asked for."""

    def __init__(self, keep: int = KEEP_BYTES) -> None:
        self.keep = keep
        self._free: list[np.ndarray] = []
        self._kept = 0
        self._lock = threading.RLock()  # a collection inside may give an array back

    def take(self, n: int) -> np.ndarray:
        """``n`` bytes (uint8) nothing else reads or writes until the view is dropped."""
        if n < MIN_BYTES:
            return np.empty(n, np.uint8)
        base = self._fitting(n)
        if base is None:
            base = np.frombuffer(pa.allocate_buffer(n), np.uint8)
        view = base[:n]
        weakref.finalize(view, self._give_back, base)
        return view

    def _fitting(self, n: int) -> np.ndarray | None:
        """The smallest free array of ``n`` to ``2 n`` bytes, taken off the free list."""
        with self._lock:
            fits = [i for i, a in enumerate(self._free) if n <= a.size <= 2 * n]
            if not fits:
                return None
            i = min(fits, key=lambda k: self._free[k].size)
            self._kept -= self._free[i].size
            return self._free.pop(i)

    def _give_back(self, base: np.ndarray) -> None:
        with self._lock:
            if self._kept + base.size <= self.keep:
                self._free.append(base)
                self._kept += base.size

    def clear(self) -> None:
        """Free every kept array (and, in a forked child, forget the parent's lock)."""
        self._lock = threading.RLock()  # a collection inside may give an array back
        self._free = []
        self._kept = 0


POOL = BufferPool()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=POOL.clear)
