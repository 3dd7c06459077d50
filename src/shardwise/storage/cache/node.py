"""The node cache protocol: byte ranges of remote objects downloaded once per node and shared
by its processes."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from shardwise.errors import ConfigError
from shardwise.storage.cache.directory import append_journal, read_journal, scan_dir
from shardwise.storage.cache.entry import EntryView, Extent, write_entry
from shardwise.storage.cache.fill import FillView, RangeReader
from shardwise.storage.cache.hits import MAP_MIN, Copied, Hits
from shardwise.storage.cache.lease import FileLock, SharedLock, owner_id
from shardwise.storage.cache.room import directory_lock, reserve_part
from shardwise.storage.cache.stats import CacheStats, fetched
from shardwise.storage.cache.streams import Streams
from shardwise.storage.cache.verified import forget_verified, mark_verified

__all__ = ["CacheStats", "NodeCache"]


class NodeCache:
    """A size-bounded, crash-safe cache of byte ranges in a directory of this node.

    Ranks, DataLoader workers and concurrent jobs that point at the same directory share
    it. The protocol (all of it survives ``kill -9`` of any process at any moment):

    - An entry is one file, ``entries/<key>``: the bytes, then a record (source, range,
      version, length, xxh3-64 digests of 16 MiB blocks: ``sums``). The key is a hash of
      the source URL (with its endpoint), the byte range and the object's version (ETag
      or mtime, and size), so jobs and datasets never collide and a changed object is a
      new entry.
    - A download holds an ``flock`` on ``locks/<key>`` (others wanting it wait, then find
      it), writes ``tmp/<key>.<bytes>.<owner>.part`` and renames it into place. A
      killed downloader's lock is released by the kernel; its part file is stale (its owner
      is dead) and is deleted by the next process that accounts for space. Entries are
      trusted only after their length and digests match the record; ``verified/<key>``
      names the file so checked in this boot (no fsync: see ``verified.settle``), and other
      processes skip the checking pass while the entry is still that file.
    - A reader holds a lease, ``leases/<key>.<owner>``, while it reads an entry. Eviction
      (least recently used first) never removes a leased entry; leases of dead processes or
      of an earlier boot (see :mod:`shardwise.storage.cache.lease`) are ignored and removed.
    - ``budget_bytes`` bounds entries plus reserved downloads on disk: room is made under an
      exclusive lock before a download starts. When everything on disk is leased, the
      download waits up to ``wait_seconds`` for room, then reads the range without caching.
    - A download given a range reader (``read_range``) runs on the cache's download
      threads, several ranges at once, and its readers in this process read the bytes as
      they arrive (see :mod:`shardwise.storage.cache.streams`); :meth:`fetch_ahead`
      starts one before anybody reads it. It is published as any download is.

    Args:
        root: the cache directory (shared by every process that should share entries).
        budget_bytes: most bytes the entries and downloads in progress take on disk.
        wait_seconds: how long a download waits for room when everything is leased
            before it reads without caching.
        lock_timeout: how long to wait for another process's download of the same range
            before reading it without caching (a stopped, not dead, downloader).
    """

    def __init__(
        self,
        root: str,
        budget_bytes: int,
        *,
        wait_seconds: float = 10.0,
        lock_timeout: float = 600.0,
    ) -> None:
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
            raise ConfigError(f"cache_bytes must be a positive integer, got {budget_bytes!r}")
        if not root:
            raise ConfigError("cache_dir must be a directory path")
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        self.lock_timeout = lock_timeout
        for sub in ("entries", "tmp", "leases", "locks", "verified"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        self._leases: dict[str, int] = {}
        self.stats = CacheStats()
        self._streams = Streams(self)
        self._hits = Hits(self.root)
        self._shared = SharedLock(os.path.join(self.root, ".lock"))  # directory_lock's file

    def __getstate__(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "budget_bytes": self.budget_bytes,
            "wait_seconds": self.wait_seconds,
            "lock_timeout": self.lock_timeout,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:  # a forked worker: the parent's leases are not ours
            self._reset()

    def _path(self, sub: str, name: str) -> str:
        return os.path.join(self.root, sub, name)

    def _global(self) -> FileLock:
        return directory_lock(self.root)

    # -- reading ----------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(
        self,
        extent: Extent,
        fetch: Callable[[], Iterable[bytes]],
        read_range: RangeReader | None = None,
    ) -> Iterator[bytes | EntryView | FillView | None]:
        """Hold ``extent``'s entry for a ``with`` block: yields its verified bytes
        (downloading them with ``fetch`` if no process of this node has; an entry found
        on disk is an :class:`EntryView`, read on demand until the block ends), or None
        when it cannot be cached now (larger than the budget, no room, or another
        process's download of it is stuck): then the caller reads the range itself.

        With ``read_range`` (the object's bytes ``[start, end)``, retried), a download
        runs by ranges on the download threads and yields at once a :class:`FillView`,
        whose slices wait only for the bytes they need (a failed download raises a
        :class:`~shardwise.errors.StorageError` naming the object from them)."""
        self._check_fork()
        if extent.length <= 0:
            yield b""
            return
        data: bytes | EntryView | FillView | None
        if read_range is not None:
            data = self._streams.acquire(extent, read_range)
        else:
            data = self._acquire(extent, fetch)
        try:
            yield data
        finally:
            if isinstance(data, (EntryView, FillView)):
                data.close()
            if data is not None and not isinstance(data, Copied):
                self._unlease(extent.key)

    @contextlib.contextmanager
    def lease_if_cached(self, extent: Extent) -> Iterator[EntryView | None]:
        """Hold ``extent``'s entry for a ``with`` block if it is on disk and good (yields
        it), else yield None; never downloads."""
        self._check_fork()
        found = self._hit(extent)
        try:
            yield found
        finally:
            if found is not None:
                found.close()
                if not isinstance(found, Copied):
                    self._unlease(extent.key)

    def _acquire(
        self, extent: Extent, fetch: Callable[[], Iterable[bytes]]
    ) -> bytes | EntryView | None:
        found = self._hit(extent)
        if found is not None:
            return found
        lock = FileLock(self._path("locks", extent.key), remove=True)
        if not lock.acquire(timeout=self.lock_timeout):
            self.stats.read_through += 1
            return None
        try:
            found = self._hit(extent)  # downloaded by whoever held the lock before us
            return found if found is not None else self._download(extent, fetch)
        finally:
            lock.release()

    def _hit(self, extent: Extent) -> EntryView | None:
        """The entry if it is on disk and good: leased (mapped where the filesystem allows),
        or if a small part of a unit (a footer, a chunk) read whole under the directory's
        lock, not leased. Its record is checked at a process's first hit of this very file,
        its digests unless a process of this node checked it before (see ``hits``)."""
        key = extent.key
        path = self._path("entries", key)
        small = bool(extent.column) and 0 < extent.length < MAP_MIN  # a footer, a chunk
        with self._shared.held():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return None
            if small:
                found = self._hits.get(path, extent, small)
            else:
                self._lease(key)
        if not small:
            found = self._hits.get(path, extent, small)
        if found is None:
            if not small:
                self._unlease(key)
            self.stats.bad_entries += 1
            with self._global().held(), contextlib.suppress(OSError):
                if os.stat(path).st_ino == st.st_ino:  # not a good copy written since
                    os.unlink(path)  # never trusted: downloaded again under the entry's lock
                    forget_verified(path)
            return None
        if found[1]:  # least recently used goes first; the next use skips the check
            self._hits.stamp(path)
        self.stats.hits += 1
        return found[0]

    def _lease(self, key: str) -> None:
        with self._mutex:
            n = self._leases.get(key, 0)
            if n == 0:
                os.close(
                    os.open(
                        self._path("leases", f"{key}.{owner_id()}"), os.O_CREAT | os.O_WRONLY, 0o666
                    )
                )
            self._leases[key] = n + 1

    def _unlease(self, key: str) -> None:
        with self._mutex:
            n = self._leases.get(key, 0) - 1
            if n > 0:
                self._leases[key] = n
                return
            self._leases.pop(key, None)
            with contextlib.suppress(OSError):
                os.unlink(self._path("leases", f"{key}.{owner_id()}"))

    # -- downloading ------------------------------------------------------------------
    def _download(self, extent: Extent, fetch: Callable[[], Iterable[bytes]]) -> bytes | None:
        key = extent.key
        need = extent.length + len(extent.record())
        part = reserve_part(self.root, key, need, self.budget_bytes, self.wait_seconds, self.stats)
        if part is None:
            self.stats.read_through += 1
            return None
        try:
            data = write_entry(part, extent, fetch())
            with self._global().held():
                os.replace(part, self._path("entries", key))
                self._lease(key)
            mark_verified(self._path("entries", key))  # its digests are of these very bytes
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
        column = self.stats.downloaded(extent.column, len(data))
        self._journal("download", extent.key, extent.source, extent.length, extent.start, column)
        return data

    def fetch_ahead(self, extent: Extent, read_range: RangeReader) -> None:
        """Start downloading ``extent`` on the download threads (by ranges, with
        ``read_range``) unless it is on disk or being downloaded; returns at once. A
        later :meth:`lease` of it reads from that download. Nothing is raised: a
        download that fails is left to the reader, who gets its error."""
        self._check_fork()
        self._streams.ahead(extent, read_range)

    def note_uncached(self, source: str, nbytes: int) -> None:
        """Count (and journal) bytes read from the remote object outside any entry."""
        self.stats.uncached_bytes += nbytes
        self.stats.bytes_fetched += nbytes
        self._journal("uncached", "", source, nbytes)

    def _journal(
        self, kind: str, key: str, source: str, nbytes: int, start: int = -1, column: str = ""
    ) -> None:
        """Record one fetch in the node's journal, so what every process of the node
        fetched can be counted afterwards."""
        record = {"kind": kind, "key": key, "source": source, "start": start, "bytes": nbytes}
        append_journal(self.root, record | ({"column": column} if column else {}))

    # -- the whole cache --------------------------------------------------------------
    def has(self, extent: Extent) -> bool:
        """True if ``extent``'s entry is on disk now (not checked, not leased)."""
        return os.path.exists(self._path("entries", extent.key))

    def usage(self) -> int:
        """Bytes of entries and reserved downloads now (what the budget bounds)."""
        with self._global().held(shared=True):
            return scan_dir(self.root).used

    def journal(self) -> list[dict[str, Any]]:
        """Every download recorded on this node (most recent few MiB)."""
        return read_journal(self.root)

    def node_fetched(self) -> dict[str, Any]:
        """Bytes every process of this node fetched (``bytes_fetched``) and downloaded per
        column (``bytes_per_column``), from the journal: :attr:`stats` counts only this
        process's, and DataLoader workers are processes of their own."""
        return fetched(self.journal())
