"""A node-local cache of byte ranges of remote objects, shared by every process of a node.

Ranks, DataLoader workers and concurrent jobs that point at the same directory share
it. The protocol (all of it survives ``kill -9`` of any process at any moment):

- An entry is one file, ``entries/<key>``: the bytes, then a record (source, range,
  version, length, CRC-32). The key is a hash of the source URL (with its endpoint),
  the byte range and the object's version (ETag or mtime, and size), so jobs and
  datasets never collide and a changed object is a new entry.
- A download holds an ``flock`` on ``locks/<key>`` (others wanting it wait, then find
  it), writes ``tmp/<key>.<bytes>.<owner>.part``, fsyncs and renames it into place. A
  killed downloader's lock is released by the kernel; its part file is stale (its owner
  is dead) and is deleted by the next process that accounts for space. Entries are
  trusted only after their length and CRC-32 match the record.
- A reader holds a lease, ``leases/<key>.<owner>``, while it reads an entry. Eviction
  (least recently used first) never removes a leased entry; leases of dead processes or
  of an earlier boot (see :mod:`shardwise.storage.lease`) are ignored and removed.
- ``budget_bytes`` bounds entries plus reserved downloads on disk: room is made under an
  exclusive lock before a download starts. When everything on disk is leased, the
  download waits up to ``wait_seconds`` for room, then reads the range without caching.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError, StorageError
from shardwise.storage.lease import FileLock, is_alive, owner_id

__all__ = ["CacheStats", "EntryView", "Extent", "NodeCache"]

MAGIC = b"SWCACHE1"
JOURNAL_MAX = 4 * 2**20


@dataclass(frozen=True)
class Extent:
    """A byte range ``[start, end)`` of one version of one object.

    Attributes:
        source: the object's URL (with the endpoint, when one is not implied by it).
        start, end: the range.
        version: what changes when the object changes (ETag or mtime, and size).
    """

    source: str
    start: int
    end: int
    version: str

    @property
    def length(self) -> int:
        """Bytes in the range."""
        return self.end - self.start

    @property
    def key(self) -> str:
        """The entry's name: a hash of everything above."""
        text = f"{self.source}\n{self.start}\n{self.end}\n{self.version}"
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def record(self, crc: int) -> bytes:
        """The trailer written after the bytes: a JSON record, its length, the magic."""
        body = json.dumps({"source": self.source, "start": self.start, "end": self.end,
                           "version": self.version, "length": self.length, "crc32": f"{crc:08x}"}).encode()
        return body + len(body).to_bytes(8, "little") + MAGIC


@dataclass
class CacheStats:
    """What one process did with the cache (downloads are also journaled per node)."""

    hits: int = 0
    downloads: int = 0
    bytes_downloaded: int = 0
    read_through: int = 0
    evictions: int = 0
    bad_entries: int = 0
    uncached_bytes: int = 0


class BadEntry(Exception):
    """An entry whose record, length or checksum does not match."""


CRC_STEP = 8 * 2**20
_VERIFIED: set[tuple[str, int, int, int]] = set()  # (path, device, inode, size) whose CRC-32 matched here


class EntryView:
    """The bytes of one entry, read from its open file on demand (``os.pread``): slicing
    reads only that range, so a reader that needs some columns of a row group reads those.

    Args:
        fd: the entry file, open for reading (closed by :meth:`close`).
        length: bytes of data (the record after them is not part of the view).
        path: the entry's path, for errors.
    """

    def __init__(self, fd: int, length: int, path: str) -> None:
        self._fd = fd
        self._length = length
        self.path = path

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: slice) -> bytes:
        start, stop, _ = index.indices(self._length)
        want = max(0, stop - start)
        data = os.pread(self._fd, want, start) if want else b""
        if len(data) != want:
            raise StorageError(f"cache entry {self.path} shrank while in use (read {len(data)} of {want} bytes "
                               f"at {start})", self.path)
        return data

    def __bytes__(self) -> bytes:
        return self[:]

    def __eq__(self, other: object) -> bool:
        return bytes(self) == other if isinstance(other, (bytes, bytearray, memoryview, EntryView)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def close(self) -> None:
        """Close the entry's file."""
        with contextlib.suppress(OSError):
            os.close(self._fd)


def open_entry(path: str, extent: Extent | None = None, *, check_crc: bool = True) -> EntryView:
    """An entry's data, after its record is checked (and its CRC-32, if ``check_crc``).

    Raises:
        BadEntry: a missing or wrong record, a wrong length, or a checksum mismatch.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        view = _checked(fd, path, extent, check_crc)
    except BaseException:
        os.close(fd)
        raise
    return view


def _checked(fd: int, path: str, extent: Extent | None, check_crc: bool) -> EntryView:
    total = os.fstat(fd).st_size
    tail = os.pread(fd, 16, max(0, total - 16))
    if len(tail) < 16 or tail[-8:] != MAGIC:
        raise BadEntry("no record at the end (truncated or not a cache entry)")
    size = int.from_bytes(tail[:8], "little")
    if size > total - 16:
        raise BadEntry("record length is larger than the file")
    try:
        rec = json.loads(os.pread(fd, size, total - 16 - size))
    except ValueError as exc:
        raise BadEntry(f"unreadable record ({exc})") from None
    length = total - 16 - size
    if not isinstance(rec, dict) or rec.get("length") != length:
        raise BadEntry(f"{length} bytes, the record says {rec.get('length') if isinstance(rec, dict) else '?'}")
    found = Extent(str(rec.get("source")), int(rec.get("start", -1)), int(rec.get("end", -1)), str(rec.get("version")))
    if found.key != os.path.basename(path) or (extent is not None and found != extent):
        raise BadEntry("the record names another range or object version")
    if check_crc:
        crc = 0
        for lo in range(0, length, CRC_STEP):
            crc = zlib.crc32(os.pread(fd, min(CRC_STEP, length - lo), lo), crc)
        if f"{crc:08x}" != rec.get("crc32"):
            raise BadEntry("checksum mismatch")
    return EntryView(fd, length, path)


def read_entry(path: str, extent: Extent | None = None) -> bytes:
    """The verified bytes of the entry at ``path`` (record, length and CRC-32 checked,
    and the record checked against ``extent`` if given).

    Raises:
        BadEntry: a missing or wrong record, a wrong length, or a checksum mismatch.
    """
    view = open_entry(path, extent)
    try:
        return bytes(view)
    finally:
        view.close()


class NodeCache:
    """A size-bounded, crash-safe cache of byte ranges in a directory of this node.

    Args:
        root: the cache directory (shared by every process that should share entries).
        budget_bytes: most bytes the entries and downloads in progress take on disk.
        wait_seconds: how long a download waits for room when everything is leased
            before it reads without caching.
        lock_timeout: how long to wait for another process's download of the same range
            before reading it without caching (a stopped, not dead, downloader).
    """

    def __init__(self, root: str, budget_bytes: int, *, wait_seconds: float = 10.0,
                 lock_timeout: float = 600.0) -> None:
        if isinstance(budget_bytes, bool) or not isinstance(budget_bytes, int) or budget_bytes <= 0:
            raise ConfigError(f"cache_bytes must be a positive integer, got {budget_bytes!r}")
        if not root:
            raise ConfigError("cache_dir must be a directory path")
        self.root = os.path.abspath(os.path.expanduser(os.fspath(root)))
        self.budget_bytes = budget_bytes
        self.wait_seconds = wait_seconds
        self.lock_timeout = lock_timeout
        for sub in ("entries", "tmp", "leases", "locks"):
            os.makedirs(os.path.join(self.root, sub), exist_ok=True)
        self._reset()

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._mutex = threading.Lock()
        self._leases: dict[str, int] = {}
        self.stats = CacheStats()

    def __getstate__(self) -> dict[str, Any]:
        return {"root": self.root, "budget_bytes": self.budget_bytes,
                "wait_seconds": self.wait_seconds, "lock_timeout": self.lock_timeout}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset()

    def _check_fork(self) -> None:
        if os.getpid() != self._pid:  # a forked worker: the parent's leases are not ours
            self._reset()

    def _path(self, sub: str, name: str) -> str:
        return os.path.join(self.root, sub, name)

    def _global(self) -> FileLock:
        return FileLock(os.path.join(self.root, ".lock"))

    # -- reading ----------------------------------------------------------------------
    @contextlib.contextmanager
    def lease(self, extent: Extent, fetch: Callable[[], Iterable[bytes]]) -> Iterator[bytes | EntryView | None]:
        """Hold ``extent``'s entry for a ``with`` block: yields its verified bytes
        (downloading them with ``fetch`` if no process of this node has; an entry found
        on disk is an :class:`EntryView`, read on demand until the block ends), or None
        when it cannot be cached now (larger than the budget, no room, or another
        process's download of it is stuck): then the caller reads the range itself."""
        self._check_fork()
        if extent.length <= 0:
            yield b""
            return
        data = self._acquire(extent, fetch)
        try:
            yield data
        finally:
            if isinstance(data, EntryView):
                data.close()
            if data is not None:
                self._unlease(extent.key)

    def _acquire(self, extent: Extent, fetch: Callable[[], Iterable[bytes]]) -> bytes | EntryView | None:
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
        """The entry, leased, if it is on disk and good. Its record is checked at every
        hit; its CRC-32 the first time this process uses this file (entries never change
        once renamed into place: a new download is a new file)."""
        key = extent.key
        path = self._path("entries", key)
        with self._global().held(shared=True):
            try:
                st = os.stat(path)
            except FileNotFoundError:
                return None
            self._lease(key)
        inode, seen = st.st_ino, (path, st.st_dev, st.st_ino, st.st_size)
        try:
            data = open_entry(path, extent, check_crc=seen not in _VERIFIED)
            _VERIFIED.add(seen)
        except (BadEntry, OSError):
            self._unlease(key)
            self.stats.bad_entries += 1
            with self._global().held(), contextlib.suppress(OSError):
                if os.stat(path).st_ino == inode:  # not a good copy written since
                    os.unlink(path)  # never trusted: downloaded again under the entry's lock
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # least recently used goes first
        self.stats.hits += 1
        return data

    def _lease(self, key: str) -> None:
        with self._mutex:
            n = self._leases.get(key, 0)
            if n == 0:
                os.close(os.open(self._path("leases", f"{key}.{owner_id()}"), os.O_CREAT | os.O_WRONLY, 0o666))
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
        need = extent.length + len(extent.record(0))
        part = self._reserve(key, need)
        if part is None:
            self.stats.read_through += 1
            return None
        try:
            data = self._write_part(part, extent, fetch)
            with self._global().held():
                os.replace(part, self._path("entries", key))
                self._lease(key)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(part)
            raise
        self.stats.downloads += 1
        self.stats.bytes_downloaded += len(data)
        self._journal("download", extent.key, extent.source, extent.length, extent.start)
        return data

    def _write_part(self, part: str, extent: Extent, fetch: Callable[[], Iterable[bytes]]) -> bytes:
        chunks: list[bytes] = []
        crc = 0
        with open(part, "wb") as f:
            for chunk in fetch():
                f.write(chunk)
                crc = zlib.crc32(chunk, crc)
                chunks.append(chunk)
            data = b"".join(chunks)
            if len(data) != extent.length:
                raise StorageError(f"got {len(data)} bytes of {extent.source} [{extent.start}, {extent.end}), "
                                   f"expected {extent.length}", extent.source)
            f.write(extent.record(crc))
            f.flush()
            os.fsync(f.fileno())
        return data

    def note_uncached(self, source: str, nbytes: int) -> None:
        """Count (and journal) bytes read from the remote object outside any entry."""
        self.stats.uncached_bytes += nbytes
        self._journal("uncached", "", source, nbytes)

    def _journal(self, kind: str, key: str, source: str, nbytes: int, start: int = -1) -> None:
        """Append one line per fetch to the node's journal (``journal.log``), so what every
        process of the node fetched can be counted afterwards."""
        path = os.path.join(self.root, "journal.log")
        line = json.dumps({"t": round(time.time(), 3), "pid": os.getpid(), "kind": kind, "key": key,
                           "source": source, "start": start, "bytes": nbytes}) + "\n"
        with contextlib.suppress(OSError):
            if os.path.getsize(path) > JOURNAL_MAX:
                os.replace(path, path + ".1")
        with contextlib.suppress(OSError):
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
            try:
                os.write(fd, line.encode())
            finally:
                os.close(fd)

    def _reserve(self, key: str, need: int) -> str | None:
        """A part file counted as ``need`` bytes, once there is room; None if there is none."""
        if need > self.budget_bytes:
            return None
        deadline = time.monotonic() + self.wait_seconds
        while True:
            with self._global().held():
                if self._make_room(need):
                    part = self._path("tmp", f"{key}.{need}.{owner_id()}.part")
                    os.close(os.open(part, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o666))
                    return part
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def _make_room(self, need: int) -> bool:
        """Evict unleased entries, least recently used first, until ``need`` more bytes fit
        (called under the exclusive lock)."""
        scan = scan_dir(self.root, clean=True)
        used = scan.used
        for _mtime, size, key in sorted(scan.entries):
            if used + need <= self.budget_bytes:
                break
            if key in scan.leased:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self._path("entries", key))
                used -= size
                self.stats.evictions += 1
        return used + need <= self.budget_bytes

    # -- the whole cache --------------------------------------------------------------
    def usage(self) -> int:
        """Bytes of entries and reserved downloads now (what the budget bounds)."""
        with self._global().held(shared=True):
            return scan_dir(self.root).used

    def journal(self) -> list[dict[str, Any]]:
        """Every download recorded on this node (most recent few MiB)."""
        out: list[dict[str, Any]] = []
        for name in ("journal.log.1", "journal.log"):
            with contextlib.suppress(OSError), open(os.path.join(self.root, name), encoding="utf-8") as f:
                out.extend(json.loads(line) for line in f if line.strip())
        return out


@dataclass
class Scan:
    """What a cache directory holds: entries ``(mtime, size, key)``, leased keys, and the
    bytes of entries plus live reservations."""

    entries: list[tuple[float, int, str]]
    leased: set[str]
    used: int


def scan_dir(root: str, clean: bool = False) -> Scan:
    """Look at a cache directory; ``clean`` removes leases and part files of dead owners."""
    alive: dict[str, bool] = {}

    def live(owner: str) -> bool:
        if owner not in alive:
            alive[owner] = is_alive(owner)
        return alive[owner]

    entries = []
    for e in os.scandir(os.path.join(root, "entries")):
        with contextlib.suppress(FileNotFoundError):
            st = e.stat()
            entries.append((st.st_mtime, st.st_size, e.name))
    leased: set[str] = set()
    for e in os.scandir(os.path.join(root, "leases")):
        key, _, owner = e.name.partition(".")
        if live(owner):
            leased.add(key)
        elif clean:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    reserved = 0
    for e in os.scandir(os.path.join(root, "tmp")):
        parts = e.name.split(".")
        if len(parts) == 4 and parts[1].isdigit() and live(parts[2]):
            reserved += int(parts[1])
        elif clean:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    return Scan(entries, leased, sum(s for _, s, _ in entries) + reserved)
