"""Serve reads of a remote file from byte ranges already in memory (a cache's entries).

While :func:`serving` is active on a thread, :func:`shardwise.storage.open_input` of that
URL returns a :class:`SparseFile`: reads inside the given pieces come from memory; a read
that leaves them is fetched from the remote file itself (one ranged read), so a reader
never gets wrong bytes, only a slower read (counted in ``SparseFile.misses``). Pieces that
hand out views (memory-mapped cache entries) are read without a copy by ``read_buffer``
(Arrow's reads) and ``read_at`` (the Parquet page reader's).
"""

from __future__ import annotations

import bisect
import contextlib
import mmap
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import IO, Protocol

from shardwise.errors import StorageError
from shardwise.storage.rawfile import SizedRawFile

__all__ = ["Bytes", "SparseFile", "overlay_for", "serving"]

RangeReader = Callable[[int, int], bytes]
GATHERED = 8  # ranges across pieces a file keeps (copied once, for a unit's head and rest)


class Bytes(Protocol):
    """What a piece is: ``bytes``, or anything with a length that slices into bytes
    (a cache entry read on demand)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: slice, /) -> bytes: ...


_SERVED: ContextVar[dict[str, Callable[[], IO[bytes]]] | None] = ContextVar(
    "shardwise_served", default=None
)


class SparseFile(SizedRawFile):
    """A read-only, seekable file of ``size`` bytes made of in-memory pieces.

    Args:
        size: the whole file's size.
        pieces: ``(offset, data)`` pairs, not overlapping (only the ranges read are
            sliced out of ``data``).
        fallback: reads ``[start, end)`` of the real file, for reads outside the pieces.
        url: the real file's URL, named by errors.

    Raises:
        StorageError: from ``read``, naming the URL and the byte range, when a range is
            neither in the pieces nor readable from the real file (an ``OSError`` too, so
            code that reads file objects handles it as one).
    """

    def __init__(
        self,
        size: int,
        pieces: list[tuple[int, Bytes]],
        fallback: RangeReader | None = None,
        url: str = "<cached file>",
    ) -> None:
        super().__init__(size)
        self._url = url
        self._pieces = sorted(pieces, key=lambda p: p[0])
        self._starts = [p[0] for p in self._pieces]
        self._fallback = fallback
        self._gathered: dict[int, memoryview] = {}  # ranges read_at copied, by their start
        self.misses = 0

    def size(self) -> int:
        """The whole file's size."""
        return self._size

    def positional_fd(self) -> int | None:
        """A descriptor holding this file's bytes at the same offsets (a whole-file cache
        entry, read from offset 0 up to :meth:`size`), or None: for readers that read by
        ``os.pread`` rather than through the position."""
        if len(self._pieces) != 1 or self._pieces[0][0] != 0:
            return None
        data = self._pieces[0][1]
        fd = getattr(data, "fd", None)
        return fd if isinstance(fd, int) and fd >= 0 and len(data) >= self._size else None

    def readinto(self, buffer: bytearray | memoryview) -> int:  # type: ignore[override]
        """Fill ``buffer`` from the position: straight from the pieces (a cache entry's
        file is read into it, no copy between), or from the remote file."""
        view = memoryview(buffer).cast("B")
        end = min(self._size, self._pos + len(view))
        done = 0
        while self._pos < end:
            n = self._into(self._pos, view[done : done + end - self._pos])
            if not n:
                chunk = self._from_remote(self._pos, end)
                n = len(chunk)
                view[done : done + n] = chunk
            done += n
            self._pos += n
        return done

    def _into(self, start: int, view: memoryview) -> int:
        """Bytes from ``start`` copied into ``view`` from the piece holding ``start``."""
        piece = self._piece(start)
        if piece is None:
            return 0
        off, data = piece
        n = min(len(view), off + len(data) - start)
        if n <= 0:
            return 0
        into = getattr(data, "readinto_at", None)
        if into is not None:
            into(view[:n], start - off)
        else:
            view[:n] = data[start - off : start - off + n]
        return n

    def close(self) -> None:
        """Close the file (and let go the copy :meth:`read_at` kept)."""
        self._gathered = {}
        super().close()

    def read_buffer(self, n: int | None = -1) -> memoryview:
        """Read as :meth:`read` does, but as a buffer: a view of a memory-mapped piece (no
        copy) when the bytes lie in one (what Arrow calls to read a Python file)."""
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        out = self.read_at(end - self._pos, self._pos)
        self._pos += len(out)
        return out

    def read_at(self, n: int, start: int) -> memoryview:
        """``n`` bytes from ``start``, as :meth:`read_buffer` gives them (else copied into
        one new buffer); the position does not move."""
        end = min(self._size, start + max(0, n))
        found = self._view(start, end)
        if found is not None:
            return found
        kept = self._gathered.get(start)
        if kept is not None and len(kept) >= end - start:
            return kept[: end - start]  # a range read again (a unit's rest)
        # an anonymous map: the kernel zeroes its pages as they are written, no pass of its own
        buf = memoryview(mmap.mmap(-1, max(1, end - start)))[: max(0, end - start)]
        pos, self._pos = self._pos, start
        try:
            got = self.readinto(buf)
        finally:
            self._pos = pos
        if len(self._gathered) >= GATHERED:
            self._gathered.clear()
        self._gathered[start] = buf[:got]
        return self._gathered[start]

    def _view(self, start: int, end: int) -> memoryview | None:
        """``[start, end)`` as a view of the piece holding it, if that piece hands out
        views (a memory-mapped cache entry's ``view``)."""
        piece = self._piece(start)
        if piece is None or end <= start:
            return None
        off, data = piece
        view = getattr(data, "view", None)
        return view(start - off, end - off) if view is not None and end <= off + len(data) else None

    def read(self, n: int | None = -1) -> bytes:
        end = self._size if n is None or n < 0 else min(self._size, self._pos + n)
        out: list[bytes] = []
        while self._pos < end:
            chunk = self._from_memory(self._pos, end) or self._from_remote(self._pos, end)
            out.append(chunk)
            self._pos += len(chunk)
        return b"".join(out)

    def readall(self) -> bytes:
        return self.read(-1)

    def _from_memory(self, start: int, end: int) -> bytes:
        piece = self._piece(start)
        if piece is not None:
            off, data = piece
            if start < off + len(data):
                return data[start - off : min(end, off + len(data)) - off]
        return b""

    def _piece(self, start: int) -> tuple[int, Bytes] | None:
        """The piece starting last at or before ``start`` (it may end before it)."""
        i = bisect.bisect_right(self._starts, start) - 1
        return self._pieces[i] if i >= 0 else None

    def _from_remote(self, start: int, end: int) -> bytes:
        i = bisect.bisect_right(self._starts, start)
        stop = min(end, self._starts[i]) if i < len(self._starts) else end
        if self._fallback is None:
            raise StorageError(
                f"{self._url}: bytes {start}-{stop} are not in the cached pieces and no remote "
                "file was given",
                self._url,
            )
        self.misses += 1
        data = self._fallback(start, stop)
        if not data:
            raise StorageError(
                f"{self._url}: the remote file ends at byte {start}, before the {self._size} "
                "bytes it had when it was indexed (it changed since: index the dataset again)",
                self._url,
            )
        return data


@contextlib.contextmanager
def serving(url: str, opener: Callable[[], IO[bytes]]) -> Iterator[None]:
    """While active (on this thread or task), opening ``url`` calls ``opener`` instead."""
    current = dict(_SERVED.get() or {})
    current[url] = opener
    token = _SERVED.set(current)
    try:
        yield
    finally:
        _SERVED.reset(token)


def overlay_for(url: str) -> Callable[[], IO[bytes]] | None:
    """The opener :func:`serving` installed for ``url``, if any."""
    served = _SERVED.get()
    return None if served is None else served.get(url)
