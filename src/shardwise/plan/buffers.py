"""Window arrays reused once nothing refers to them any more (pure numpy).

A fresh array of a few hundred KB costs a page fault per 4 KB page the first time it is
written (the allocator maps new memory for it and gives it back when it is freed): for a
window of ``concat`` batches (arrays of 512 KB) that was most of the cost of building it.
:class:`Buffers` keeps the arrays it handed out and hands one out again when no batch,
view or tensor made from it is alive any more: every numpy view (and ``torch.from_numpy``
of one) holds a reference to the array that owns the memory, so an array whose only
references are the pool's own is free to be written again.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

__all__ = ["Buffers"]

KEEP = 24  # arrays kept per shape and dtype (windows alive at once: queued, made, consumed)


class Buffers:
    """A pool of arrays by shape and dtype (see the module docstring); not thread-safe,
    used by the one thread that builds the windows."""

    def __init__(self, keep: int = KEEP) -> None:
        self.keep = keep
        self._kept: dict[tuple[tuple[int, ...], str], list[np.ndarray]] = {}

    def empty(self, shape: tuple[int, ...], dtype: Any) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` (contents undefined), reused when free."""
        kept = self._kept.setdefault((shape, np.dtype(dtype).str), [])
        for i in range(len(kept) - 1, -1, -1):  # the latest handed out first: still cached
            # references: the list, getrefcount's argument (nothing else holds it)
            if sys.getrefcount(kept[i]) == 2:
                out = kept.pop(i)
                kept.append(out)
                return out
        out = np.empty(shape, dtype=dtype)
        if len(kept) < self.keep:
            kept.append(out)
        return out
