"""Reads of a plain tar at given offsets, for the fast walk and its batches.

A local file is read through its descriptor: ``os.pread`` for a header, and one
``os.preadv`` for a run of members that lie close together in the file, each member's
bytes landing straight in its place of a column's buffer and the headers and padding
between them in a scratch buffer. No seek, no Python file object in the way, one system
call per run instead of two per member. A node cache's whole-file entry is read the same
way, through the descriptor its file object names (``positional_fd``: the entry file holds
the object's bytes at the same offsets, then its own record, which no read reaches: reads
stop at ``size``). Anything else (a file object without a descriptor, a file served from
pieces) is read with ``seek`` and ``readinto`` as before.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Sequence
from typing import IO

import numpy as np

__all__ = ["GAP", "Member", "Positional"]

GAP = 64 * 2**10  # bytes between two members read in one call at most (headers, padding)


def _iov_max() -> int:
    """Buffers one ``preadv`` takes at most."""
    try:
        return max(2, min(1024, os.sysconf("SC_IOV_MAX")))
    except (AttributeError, ValueError, OSError):
        return 16


_IOV = _iov_max()
Member = tuple[int, memoryview]  # a member's data offset, and where its bytes go


class Positional:
    """The file ``f`` of ``size`` bytes, read at offsets (never through its position)."""

    def __init__(self, f: IO[bytes], size: int) -> None:
        self.f = f
        self.size = size
        self.fd = _descriptor(f, size)
        self._scratch = np.empty(GAP if self.fd is not None else 0, np.uint8).data

    def read(self, pos: int, n: int) -> bytes:
        """Up to ``n`` bytes at ``pos`` (fewer at the end of the file)."""
        if self.fd is not None:
            return os.pread(self.fd, max(0, min(n, self.size - pos)), pos)
        self.f.seek(pos)
        return self.f.read(n)

    def read_members(self, members: Sequence[Member]) -> tuple[Member, int] | None:
        """Fill every member's view with its bytes (``members`` in file order); the first
        member the file ended in and the bytes it had, or None when all are whole."""
        if self.fd is None:
            return _first_short(members, lambda pos, view: _read_one(self.f, pos, view))
        i = 0
        while i < len(members):
            if members[i][0] + len(members[i][1]) > self.size:  # past the end: read what is
                return _first_short(members[i:], self._one)
            j, iov, want = self._run(members, i)
            if os.preadv(self.fd, iov, members[i][0]) < want:  # the end, or a read cut short
                short = _first_short(members[i:j], self._one)
                if short is not None:
                    return short
            i = j
        return None

    def _run(self, members: Sequence[Member], i: int) -> tuple[int, list[memoryview], int]:
        """The members from ``i`` read by one call: up to where they end, the buffers to
        read into (the gaps into the scratch buffer) and the bytes they take."""
        pos, view = members[i]
        iov, end = [view], pos + len(view)
        j = i + 1
        while j < len(members) and len(iov) + 2 <= _IOV:
            nxt, nview = members[j]
            if nxt < end or nxt - end > GAP or nxt + len(nview) > self.size:
                break
            if nxt > end:
                iov.append(self._scratch[: nxt - end])
            iov.append(nview)
            end = nxt + len(nview)
            j += 1
        return j, iov, end - pos

    def _one(self, pos: int, view: memoryview) -> int:
        """Bytes read into ``view`` from ``pos`` (fewer where the file ends)."""
        fd, got = self.fd, 0
        view = view[: max(0, self.size - pos)]
        while fd is not None and got < len(view):
            n = os.preadv(fd, [view[got:]], pos + got)
            if not n:
                break
            got += n
        return got


def _first_short(
    members: Sequence[Member], read: Callable[[int, memoryview], int]
) -> tuple[Member, int] | None:
    """Read the members one by one: the first one not read whole and its bytes read."""
    for m in members:
        got = read(*m)
        if got < len(m[1]):
            return m, got
    return None


def _read_one(f: IO[bytes], pos: int, view: memoryview) -> int:
    """Bytes read into ``view`` from ``pos`` (fewer where the file ends)."""
    f.seek(pos)
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


def _descriptor(f: IO[bytes], size: int) -> int | None:
    """The descriptor of a regular file whose bytes are exactly what ``f`` reads (not a
    wrapper that decompresses or serves other bytes), or None."""
    if getattr(f, "compression", None) or not hasattr(os, "preadv"):
        return None
    own = getattr(f, "positional_fd", None)
    if callable(own):
        return own()
    try:
        fd = f.fileno()
        st = os.fstat(fd)
    except (AttributeError, OSError, ValueError, io.UnsupportedOperation):
        return None
    return fd if stat.S_ISREG(st.st_mode) and st.st_size == size else None
