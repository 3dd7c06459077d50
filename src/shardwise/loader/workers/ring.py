"""The shared-memory ring a DataLoader worker writes its batches into (see
:mod:`shardwise.loader.workers.transport`): one ``memfd`` per worker, written at increasing
positions; the training process records in the header how far it has read, and the
worker waits (at most :data:`WAIT_S`) for that space before writing over it."""

from __future__ import annotations

import mmap
import os
import secrets
import time

import numpy as np

__all__ = ["ALIGN", "HEADER", "WAIT_S", "Ring", "aligned"]

WAIT_S = 1.0  # longest wait for space before a column goes by value
ALIGN = 64  # regions, and the columns inside a batch's region, start at multiples of this
HEADER = 64  # int64 slots: [0] bytes consumed (written by the reader), [1] token, [2] size


class Ring:
    """The worker's side: a ``memfd`` ring written at increasing positions."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.fd = os.memfd_create("shardwise-batches", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, HEADER + size)
        self.map = mmap.mmap(self.fd, HEADER + size)
        self.header = np.frombuffer(self.map, dtype=np.int64, count=HEADER // 8)
        self.data = np.frombuffer(self.map, dtype=np.uint8, offset=HEADER)
        self.token = secrets.randbits(62)
        self.header[1], self.header[2] = self.token, size
        self.pos = 0
        self.pid = os.getpid()

    def reserve(self, n: int) -> int | None:
        """The position of ``n`` free bytes, or None (too large, or full for too long)."""
        if n > self.size // 2:
            return None
        start = -(-self.pos // ALIGN) * ALIGN
        if start % self.size + n > self.size:  # regions never wrap around the end
            start += self.size - start % self.size
        deadline = None
        while start + n - int(self.header[0]) > self.size:
            now = time.monotonic()
            deadline = deadline or now + WAIT_S
            if now > deadline:
                return None
            time.sleep(0.0002)
        self.pos = start + n
        return start

    def put(self, parts: list[np.ndarray | list[np.ndarray]]) -> tuple[int, int] | None:
        """Write ``parts`` one after the other, each at a multiple of ``ALIGN`` (a part given
        as a list of arrays is written back to back); return ``(start, size)`` of the
        region, or None (see :meth:`reserve`)."""
        offsets, end = [], 0
        for p in parts:
            offsets.append(end)
            end += aligned(_nbytes(p))
        start = self.reserve(end)
        if start is None:
            return None
        o = start % self.size
        for off, p in zip(offsets, parts):
            for raw in _pieces(p):
                self.data[o + off : o + off + raw.size] = raw
                off += raw.size
        return start, end


def _nbytes(part: np.ndarray | list[np.ndarray]) -> int:
    return part.nbytes if isinstance(part, np.ndarray) else sum(a.nbytes for a in part)


def _pieces(part: np.ndarray | list[np.ndarray]) -> list[np.ndarray]:
    """A part's arrays as flat bytes."""
    arrays = [part] if isinstance(part, np.ndarray) else part
    return [a.reshape(-1).view(np.uint8) for a in arrays]


def aligned(n: int) -> int:
    """``n`` rounded up to a multiple of :data:`ALIGN`."""
    return -(-n // ALIGN) * ALIGN
