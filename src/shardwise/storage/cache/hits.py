"""Entries found on disk, opened for a hit: memory-mapped, and checked once per file per process.

A warm epoch's reads are hits, a few per unit (a Parquet row group: its file's footer and its
column chunks). Two things make them cost what reading local files costs:

- **Mapped.** Where the cache directory is on a local disk or in memory (as
  :mod:`shardwise.storage.localfs` decides for local files), a hit's entry of at least
  :data:`MAP_MIN` bytes is memory-mapped
  (:class:`MappedView`), so a reader takes its bytes as views of the page cache
  (:meth:`MappedView.view`) as it does a memory-mapped local file, not as a copy read into
  new memory. Entries are never changed in place (a download renames a whole new file over
  the name; eviction unlinks), so a mapped entry stays whole while it is read; truncating a
  cache file in place while a process reads it is not supported (the reader would get
  SIGBUS, as with any mapped file). On other filesystems entries are read by ``pread``.
- **Checked once per file per process.** The record and length of an entry are checked
  the first time a process opens that very file; the process then remembers its identity
  (device, inode, size and exact mtime), and a later hit of the same file compares only
  that (an ``fstat`` of the descriptor it opens): a file replaced, truncated or written to
  since has another identity and is checked again. Its digests are checked unless the node's
  record names the file (:func:`~shardwise.storage.cache.verified.is_verified`, read at every
  hit, so a record removed makes the next hit of any process check it).

Least-recently-used order: a hit stamps the entry's mtime (and the node's record of the
checked file, :func:`~shardwise.storage.cache.verified.mark_verified`) unless a process did
so in the last :data:`TOUCH_NS`, which bounds how stale the order eviction follows can be.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import time

from shardwise.errors import StorageError
from shardwise.storage.cache.entry import BadEntry, EntryView, Extent, check_entry
from shardwise.storage.cache.verified import identity, is_verified, mark_verified
from shardwise.storage.localfs import mappable

__all__ = ["FOOTER", "MAP_MIN", "TOUCH_NS", "Copied", "Hits", "MappedView"]

TOUCH_NS = 10_000_000_000  # a used entry's mtime is at most this old
MAP_MIN = 1 << 20  # smaller entries (footers, small columns' chunks) are read by pread
FOOTER = "(footer)"  # the column of a Parquet file's footer entries
KNOWN_MAX = 1 << 16  # files a process remembers as checked (forgotten all at once beyond)


class MappedView(EntryView):
    """An entry's bytes memory-mapped: slices copy out of the map (no system call) and
    :meth:`view` hands out the mapped bytes themselves.

    Args:
        fd: the entry file, open for reading (closed by :meth:`close`).
        length: bytes of data (the record after them is not mapped).
        path: the entry's path, for errors.
    """

    def __init__(self, fd: int, length: int, path: str) -> None:
        super().__init__(fd, length, path)
        self._map: mmap.mmap | None = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ)

    def _mapped(self) -> mmap.mmap:
        if self._map is None:
            raise StorageError(f"cache entry {self.path} read after its lease ended", self.path)
        return self._map

    def __getitem__(self, index: slice) -> bytes:
        start, stop, _ = index.indices(self._length)
        return self._mapped()[start:stop] if stop > start else b""

    def view(self, start: int, stop: int) -> memoryview:
        """The bytes ``[start, stop)`` as a view of the map (no copy). A view may outlive
        the lease: the map is let go when the last view is."""
        return memoryview(self._mapped())[start:stop]

    def readinto_at(self, view: memoryview, start: int) -> None:
        """Fill ``view`` with the bytes from ``start`` (copied out of the map)."""
        view[:] = memoryview(self._mapped())[start : start + len(view)]

    def close(self) -> None:
        """Close the file and let the map go (unmapped now, or when the last view of it
        is released)."""
        mapped, self._map = self._map, None
        if mapped is not None:
            with contextlib.suppress(BufferError):  # views remain: unmapped with the last
                mapped.close()
        super().close()


class Copied(EntryView):
    """A small entry's bytes, read whole while the cache directory's lock was held (nothing
    evicts it meanwhile), so it needs no lease and holds no descriptor: an entry under
    :data:`MAP_MIN` bytes that holds part of a unit (its ``column`` names it: a Parquet
    file's footer, :data:`FOOTER`, read by every row group of the file, or a column's chunk).

    Args:
        data: the entry's bytes.
        path: the entry's path, for errors.
    """

    def __init__(self, data: bytes, path: str) -> None:
        super().__init__(-1, len(data), path)
        self._data = data

    @property
    def fd(self) -> int:
        """No descriptor: -1 (readers take the bytes instead)."""
        return -1

    def __getitem__(self, index: slice) -> bytes:
        return self._data[index]

    def view(self, start: int, stop: int) -> memoryview:
        """The bytes ``[start, stop)`` (no copy)."""
        return memoryview(self._data)[start:stop]

    def readinto_at(self, view: memoryview, start: int) -> None:
        """Fill ``view`` with the bytes from ``start``."""
        view[:] = memoryview(self._data)[start : start + len(view)]

    def close(self) -> None:
        """Nothing to close."""


class Hits:
    """Opens the entries a process hits (see the module docstring).

    Args:
        root: the cache directory.
    """

    def __init__(self, root: str) -> None:
        self.mapped = mappable(root)
        self._known: dict[str, str] = {}  # key -> identity of the file checked (or stamped)

    def get(self, path: str, extent: Extent, small: bool) -> tuple[EntryView, bool] | None:
        """The entry at ``path`` (``small``: read whole, as :class:`Copied`), checked unless
        this very file was checked before, and whether to :meth:`stamp` it (its digests were
        checked now, or its mtime is older than :data:`TOUCH_NS`); None if it is bad or gone
        (forgotten)."""
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            stamp = self._check(fd, path, extent, st)
            if small:
                data = os.pread(fd, extent.length, 0)
                if len(data) != extent.length:
                    raise BadEntry("shorter than its record says")
            view: EntryView = (
                Copied(data, path)
                if small
                else MappedView(fd, extent.length, path)
                if self.mapped and extent.length >= MAP_MIN
                else EntryView(fd, extent.length, path)
            )
        except (BadEntry, OSError):
            os.close(fd)
            self.forget(path)
            return None
        if small:
            os.close(fd)
        return view, stamp or time.time_ns() - st.st_mtime_ns >= TOUCH_NS

    def _check(self, fd: int, path: str, extent: Extent, st: os.stat_result) -> bool:
        """Check the open file ``fd`` (now ``st``): its record unless it is the file this
        process checked before, its digests unless the node's record vouches for it; True if
        the digests were computed now."""
        key = os.path.basename(path)
        known = identity(st)
        full = not is_verified(path, st)
        if self._known.get(key) == known and not full:
            return False
        check_entry(fd, path, extent, full)  # the record names ``extent``: its length is the data's
        if len(self._known) >= KNOWN_MAX:
            self._known.clear()
        self._known[key] = known
        return full

    def stamp(self, path: str) -> None:
        """Stamp the entry at ``path`` as used now and as checked; the process remembers the
        stamped file only if it is still the one it checked."""
        key = os.path.basename(path)
        before = self._known.get(key)
        stamped = mark_verified(path)
        if stamped is not None and before is not None and _same_file(stamped, before):
            self._known[key] = stamped

    def forget(self, path: str) -> None:
        """Forget the file at ``path`` (found bad, or removed)."""
        self._known.pop(os.path.basename(path), None)


def _same_file(a: str, b: str) -> bool:
    """Whether two identities name the same file (device, inode, size), whatever the mtime."""
    return a.rsplit(":", 1)[0] == b.rsplit(":", 1)[0]
