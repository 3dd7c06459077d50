"""The fills of one process's node cache: entries downloaded by ranges on the cache's
download threads and read while they download (see :mod:`shardwise.storage.cache.fill`).

One download per entry per node still holds: a fill takes the entry's lock before it
reserves room, and this process's readers of the entry share its fill (another process
waits for the lock, then finds the entry). Publishing writes the record (with the
digests of the ranges, taken as they arrived: nothing is read back), asks the kernel to
read the part file into the page cache ahead of its readers, then renames it into
``entries/`` under the directory's lock (no ``fsync`` where the boot has an id: see
:func:`~shardwise.storage.cache.verified.settle`).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from typing import Any

from shardwise.storage.cache.downloads import Downloads
from shardwise.storage.cache.entry import EntryView, Extent
from shardwise.storage.cache.fill import Fill, FillView, RangeReader, State
from shardwise.storage.cache.lease import FileLock
from shardwise.storage.cache.room import reserve_part
from shardwise.storage.cache.verified import mark_verified, settle

__all__ = ["Streams"]


class Streams:
    """The fills in progress in this process, by entry key.

    Args:
        cache: the :class:`~shardwise.storage.cache.node.NodeCache` they fill (its
            locks, leases, stats and journal; not imported here: it imports this).
    """

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._fills: dict[str, Fill] = {}
        self._mutex = threading.Lock()
        self._order = itertools.count()
        self._downloads = Downloads(self._start_ahead, self._publish, self._fail)

    def acquire(self, extent: Extent, read_range: RangeReader) -> EntryView | FillView | None:
        """``extent``'s bytes, leased: the entry, or a view of its fill in this process
        (started here if none is), or None (read it without caching)."""
        cache = self._cache
        while True:
            found: EntryView | None = cache._hit(extent)
            if found is not None:
                return found
            fill, mine = self._fill(extent, read_range)
            if mine:
                self._begin(fill, cache.lock_timeout, cache.wait_seconds)
            state = fill.wait_started()
            if state is State.FILLING:
                cache._lease(extent.key)
                view = fill.view()
                if view is not None:
                    return view
                cache._unlease(extent.key)
            elif state is State.GIVEN_UP and mine:
                cache.stats.read_through += 1
                return None
            elif state is State.FAILED:
                FillView(fill)[0:1]  # raises the fill's error, naming the object

    def ahead(self, extent: Extent, read_range: RangeReader) -> None:
        """Start downloading ``extent`` on the download threads unless it is on disk or
        being downloaded (here or by another process); returns at once."""
        if extent.length <= 0 or self._cache.has(extent):
            return
        fill, mine = self._fill(extent, read_range)
        if mine:
            self._downloads.start_later(fill)

    def _fill(self, extent: Extent, read_range: RangeReader) -> tuple[Fill, bool]:
        with self._mutex:
            fill = self._fills.get(extent.key)
            if fill is not None:
                return fill, False
            fill = Fill(extent, read_range, next(self._order))
            fill.on_fetched = self._count
            self._fills[extent.key] = fill
            return fill, True

    def _start_ahead(self, fill: Fill) -> None:
        # locked by another process (it downloads it) or no room now: left to its reader
        with contextlib.suppress(Exception):
            self._begin(fill, 0.0, 0.0)

    def _begin(self, fill: Fill, timeout: float, wait_seconds: float) -> None:
        """Take the entry's lock and room, then hand the fill to the download threads;
        or settle it (found on disk, given up)."""
        cache, key = self._cache, fill.extent.key
        lock = FileLock(cache._path("locks", key), remove=True)
        try:
            if not lock.acquire(timeout=timeout):
                return self._settle(fill, State.GIVEN_UP)
            if os.path.exists(cache._path("entries", key)):
                lock.release()
                return self._settle(fill, State.FOUND)
            need = fill.extent.length + len(fill.extent.record())
            budget = cache.budget_bytes
            part = reserve_part(cache.root, key, need, budget, wait_seconds, cache.stats)
            if part is None:
                lock.release()
                return self._settle(fill, State.GIVEN_UP)
            fill.begin(part, lock)
        except BaseException as exc:
            lock.release()
            self._settle(fill, State.FAILED, exc)
            raise
        self._downloads.add(fill)

    def _settle(self, fill: Fill, state: State, error: BaseException | None = None) -> None:
        with self._mutex:
            if self._fills.get(fill.extent.key) is fill:
                del self._fills[fill.extent.key]
        fill.end(state, error)

    def _publish(self, fill: Fill) -> None:
        """Record, settle and rename the part file into place."""
        cache, extent = self._cache, fill.extent
        entry = cache._path("entries", extent.key)
        try:
            os.pwrite(fill.fd, extent.record(fill.sums.text()), extent.length)
            _read_ahead(fill.fd, extent.length)
            settle(fill.fd)
            with cache._global().held():
                os.replace(fill.part, entry)
            mark_verified(entry)  # its digests are of these very bytes
        except Exception as exc:  # noqa: BLE001 - the fill fails: its readers get it
            self._fail(fill, exc)
            return
        self._unlock(fill)
        self._settle(fill, State.PUBLISHED)

    def _count(self, fill: Fill) -> None:
        """Every byte of ``fill`` was fetched: count and journal the download."""
        cache, extent = self._cache, fill.extent
        column = cache.stats.downloaded(extent.column, extent.length)
        cache._journal("download", extent.key, extent.source, extent.length, extent.start, column)

    def _fail(self, fill: Fill, exc: BaseException) -> None:
        """A range could not be fetched: the part file goes, readers get ``exc``."""
        with contextlib.suppress(OSError):
            os.unlink(fill.part)
        self._unlock(fill)
        self._settle(fill, State.FAILED, exc)

    @staticmethod
    def _unlock(fill: Fill) -> None:
        lock, fill.lock = fill.lock, None
        if lock is not None:
            lock.release()


def _read_ahead(fd: int, length: int) -> None:
    """Ask the kernel to read the entry's bytes into the page cache now (in the
    background): they were written past it (:mod:`~shardwise.storage.cache.direct`)."""
    advise = getattr(os, "posix_fadvise", None)
    if advise is not None:
        with contextlib.suppress(OSError):
            advise(fd, 0, length, os.POSIX_FADV_WILLNEED)
