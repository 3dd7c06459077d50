"""A download into the node cache that its readers use while it runs.

An entry's bytes are fetched in ranges of ``RANGE`` bytes (several at once, on the
cache's download threads: :mod:`shardwise.storage.cache.downloads`), each digested in the
memory it arrived in (one block of :mod:`shardwise.storage.cache.sums` per range) and
written where it belongs in the entry's part file. A reader of this process gets a
:class:`FillView` at once: a slice of it waits only for the ranges it covers, then reads
them from the part file. When the last range is in, the cache publishes the entry as any
download is published (record with the ranges' digests, rename: see
:class:`~shardwise.storage.cache.node.NodeCache`); until then nothing on disk is an
entry, so a crash leaves only a part file, which the next process accounting for space
deletes.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
from collections.abc import Callable
from enum import Enum

from shardwise.errors import StorageError
from shardwise.storage.cache.direct import open_direct, range_buffer, write_range
from shardwise.storage.cache.entry import Extent, pread_into
from shardwise.storage.cache.lease import FileLock
from shardwise.storage.cache.sums import BLOCK, Sums

__all__ = ["RANGE", "Fill", "FillView", "RangeReader", "State"]

RANGE = BLOCK  # a range is a block of the entry's digests
RangeReader = Callable[[int, int, memoryview], None]  # fills the view with [start, end)


def _allocate(fd: int, length: int) -> None:
    """Give the part file its blocks now: a full disk fails here, before any download,
    and the writes that follow cost less than into a sparse file."""
    try:
        os.posix_fallocate(fd, 0, length)
    except OSError as exc:
        if exc.errno not in _UNSUPPORTED:
            raise
        os.ftruncate(fd, length)  # not supported here: a sparse file of that size


_UNSUPPORTED = {errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.ENOTSUP}


class State(Enum):
    """Where a fill is: starting (waiting for its lock and room), filling, published,
    found (another process had downloaded it), given up (read it without caching) or
    failed (a range could not be fetched)."""

    STARTING = "starting"
    FILLING = "filling"
    PUBLISHED = "published"
    FOUND = "found"
    GIVEN_UP = "given up"
    FAILED = "failed"


class Fill:
    """One extent being downloaded into its part file, readable as its ranges come in.

    Args:
        extent: what is downloaded.
        read_range: fills a buffer with bytes ``[start, end)`` of the object (with
            retries; a short read raises).
        order: the download threads take the ranges of fills with a reader first, then
            the lowest ``order`` (fills asked for ahead of time, in the order asked).
    """

    def __init__(self, extent: Extent, read_range: RangeReader, order: int) -> None:
        self.extent = extent
        self.read_range = read_range
        self.order = order
        self.wanted = False
        self.state = State.STARTING
        self.error: BaseException | None = None
        self.part = ""
        self.lock: FileLock | None = None
        count = max(1, -(-extent.length // RANGE))
        self._todo = list(range(count - 1, -1, -1))  # popped from the end: first range first
        self._done = [False] * count
        self._fetched = 0
        self.sums = Sums(extent.length)
        self.on_fetched: Callable[[Fill], None] | None = None
        self._fd = -1
        self._direct = -1
        self._refs = 0
        self._cond = threading.Condition()

    # -- the download's side --------------------------------------------------------
    def begin(self, part: str, lock: FileLock) -> None:
        """Start filling ``part`` (reserved, and the entry's ``lock`` held)."""
        fd = os.open(part, os.O_RDWR)
        try:
            _allocate(fd, self.extent.length)
        except BaseException:
            os.close(fd)
            raise
        direct = open_direct(part)
        with self._cond:
            self.part, self.lock, self._fd, self._refs = part, lock, fd, 1
            self._direct = direct
            self.state = State.FILLING
            self._cond.notify_all()

    def end(self, state: State, error: BaseException | None = None) -> None:
        """Settle the fill (published, found, given up or failed); readers waiting wake."""
        with self._cond:
            was = self.state
            if was in (State.STARTING, State.FILLING):
                self.state, self.error = state, error
                self._cond.notify_all()
            if was is State.FILLING:
                self._todo.clear()
                self._release()

    def next_range(self) -> tuple[int, int, int] | None:
        """The next range to fetch, ``(index, start, end)`` in the object, if any."""
        with self._cond:
            if self.state is not State.FILLING or not self._todo:
                return None
            i = self._todo.pop()
            self._refs += 1  # the part file stays open until this range is written
        start = self.extent.start + i * RANGE
        return i, start, min(self.extent.end, start + RANGE)

    def has_work(self) -> bool:
        """True while ranges wait to be fetched."""
        return self.state is State.FILLING and bool(self._todo)

    def fetch(self, i: int, start: int, end: int) -> bool:
        """Fetch range ``i`` (from :meth:`next_range`) into the part file; True if it was
        the last one."""
        try:
            return self._fetch(i, start, end)
        finally:
            with self._cond:
                self._release()

    def _fetch(self, i: int, start: int, end: int) -> bool:
        view = range_buffer(end - start, RANGE)
        self.read_range(start, end, view)
        self.sums.block(i, view)
        direct = write_range(self._fd, self._direct, view, start - self.extent.start)
        if direct < 0:
            self._direct = -1  # refused once: the rest is written through the page cache
        with self._cond:
            self._fetched += 1
            last = self._fetched == len(self._done)
        if last and self.on_fetched is not None:
            self.on_fetched(self)  # counted before its readers can have every byte
        with self._cond:
            self._done[i] = True
            self._cond.notify_all()
        return last

    @property
    def fd(self) -> int:
        """The part file, open for reading and writing while the fill runs."""
        return self._fd

    # -- the readers' side ----------------------------------------------------------
    def wait_started(self) -> State:
        """Wait until the fill has its lock and room (or cannot have them)."""
        with self._cond:
            self._cond.wait_for(lambda: self.state is not State.STARTING)
            return self.state

    def view(self) -> FillView | None:
        """A reader's view of the bytes (None once the fill is over: read the entry)."""
        with self._cond:
            if self.state is not State.FILLING:
                return None
            self.wanted = True
            self._refs += 1
            return FillView(self)

    def wait_for(self, start: int, stop: int) -> None:
        """Wait until bytes ``[start, stop)`` of the extent are in the part file.

        Raises:
            StorageError: the download failed (naming the object).
        """
        lo, hi = start // RANGE, max(start, stop - 1) // RANGE
        with self._cond:
            self._cond.wait_for(
                lambda: self.state is not State.FILLING or all(self._done[lo : hi + 1])
            )
            if all(self._done[lo : hi + 1]):
                return
            raise StorageError(
                f"download of {self.extent.source} [{self.extent.start}, {self.extent.end}) "
                f"failed: {self.error or self.state.value}",
                self.extent.source,
            ) from self.error

    def wait_complete(self) -> None:
        """Wait until every byte is in (or raise as :meth:`wait_for`)."""
        self.wait_for(0, self.extent.length)

    def unref(self) -> None:
        """A view is closed."""
        with self._cond:
            self._release()

    def _release(self) -> None:
        self._refs -= 1
        if self._refs == 0 and self._fd >= 0:
            for fd in (self._fd, self._direct):
                if fd >= 0:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._fd = self._direct = -1


class FillView:
    """The bytes of an entry being downloaded: a slice waits for its ranges, then reads
    them from the part file (which stays readable after it is renamed into place)."""

    def __init__(self, fill: Fill) -> None:
        self._fill = fill
        self._closed = False

    def __len__(self) -> int:
        return self._fill.extent.length

    def __getitem__(self, index: slice) -> bytes:
        start, stop, _ = index.indices(len(self))
        if stop <= start:
            return b""
        self._fill.wait_for(start, stop)
        data = os.pread(self._fill.fd, stop - start, start)
        if len(data) != stop - start:
            raise StorageError(
                f"cache part file of {self._fill.extent.source} shrank while in use",
                self._fill.extent.source,
            )
        return data

    def __bytes__(self) -> bytes:
        return self[:]

    def __eq__(self, other: object) -> bool:
        return (
            bytes(self) == other
            if isinstance(other, (bytes, bytearray, memoryview, FillView))
            else NotImplemented
        )

    __hash__ = None  # type: ignore[assignment]

    def readinto_at(self, view: memoryview, start: int) -> None:
        """Fill ``view`` with the bytes from ``start``, once they are in."""
        self._fill.wait_for(start, start + len(view))
        pread_into(self._fill.fd, view, start, self._fill.extent.source)

    def wait_complete(self) -> None:
        """Wait until the whole entry is downloaded."""
        self._fill.wait_complete()

    def close(self) -> None:
        """Let go of the part file."""
        if not self._closed:
            self._closed = True
            self._fill.unref()
