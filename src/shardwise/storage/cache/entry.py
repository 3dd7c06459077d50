"""The on-disk format of one cache entry (its bytes, then a record with their digests) and its
verification."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from shardwise.errors import StorageError
from shardwise.storage.cache.sums import Sums, check, placeholder
from shardwise.storage.cache.verified import settle

__all__ = [
    "BadEntry",
    "EntryView",
    "Extent",
    "check_entry",
    "open_entry",
    "pread_into",
    "read_entry",
    "write_entry",
]

MAGIC = b"SWCACHE1"


@dataclass(frozen=True)
class Extent:
    """A byte range ``[start, end)`` of one version of one object.

    Attributes:
        source: the object's URL (with the endpoint, when one is not implied by it).
        start, end: the range.
        version: what changes when the object changes (ETag or mtime, and size).
        column: what the range holds, for the cache's stats (a Parquet column chunk's
            column, ``"(footer)"``, or empty: a whole unit); not part of the key.
    """

    source: str
    start: int
    end: int
    version: str
    column: str = field(default="", compare=False)  # what the bytes are, for stats only

    @property
    def length(self) -> int:
        """Bytes in the range."""
        return self.end - self.start

    @property
    def key(self) -> str:
        """The entry's name: a hash of everything above."""
        text = f"{self.source}\n{self.start}\n{self.end}\n{self.version}"
        return hashlib.sha256(text.encode()).hexdigest()[:40]

    def record(self, sums: str | None = None) -> bytes:
        """The trailer written after the bytes: a JSON record (with ``sums``, the text of
        their :class:`~shardwise.storage.cache.sums.Sums`; without, a placeholder of the
        same length), its length, the magic."""
        body = json.dumps(
            {
                "source": self.source,
                "start": self.start,
                "end": self.end,
                "version": self.version,
                "length": self.length,
                "xxh3": placeholder(self.length) if sums is None else sums,
            }
        ).encode()
        return body + len(body).to_bytes(8, "little") + MAGIC


class BadEntry(Exception):
    """An entry whose record, length or checksum does not match."""


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

    @property
    def fd(self) -> int:
        """The entry file's descriptor: the object's bytes from offset 0 (then the record)."""
        return self._fd

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, index: slice) -> bytes:
        start, stop, _ = index.indices(self._length)
        want = max(0, stop - start)
        data = os.pread(self._fd, want, start) if want else b""
        if len(data) != want:
            raise StorageError(
                f"cache entry {self.path} shrank while in use (read {len(data)} of {want} bytes "
                f"at {start})",
                self.path,
            )
        return data

    def readinto_at(self, view: memoryview, start: int) -> None:
        """Fill ``view`` with the bytes from ``start`` (read straight into it)."""
        pread_into(self._fd, view, start, self.path)

    def __bytes__(self) -> bytes:
        return self[:]

    def __eq__(self, other: object) -> bool:
        return (
            bytes(self) == other
            if isinstance(other, (bytes, bytearray, memoryview, EntryView))
            else NotImplemented
        )

    __hash__ = None  # type: ignore[assignment]

    def close(self) -> None:
        """Close the entry's file."""
        with contextlib.suppress(OSError):
            os.close(self._fd)


def pread_into(fd: int, view: memoryview, start: int, path: str) -> None:
    """Fill ``view`` from ``fd`` at ``start``.

    Raises:
        StorageError: the file ends first (naming ``path``).
    """
    done = 0
    while done < len(view):
        n = os.preadv(fd, [view[done:]], start + done)
        if n <= 0:
            raise StorageError(
                f"cache file {path} shrank while in use (read {done} of {len(view)} bytes "
                f"at {start})",
                path,
            )
        done += n


def open_entry(path: str, extent: Extent | None = None, *, check_sums: bool = True) -> EntryView:
    """An entry's data, after its record is checked (and its digests, if ``check_sums``).

    Raises:
        BadEntry: a missing or wrong record, a wrong length, or a checksum mismatch.
    """
    fd = os.open(path, os.O_RDONLY)
    try:
        view = check_entry(fd, path, extent, check_sums)
    except BaseException:
        os.close(fd)
        raise
    return view


def check_entry(fd: int, path: str, extent: Extent | None, check_sums: bool) -> EntryView:
    """The entry open as ``fd`` as a view, checked as :func:`open_entry` checks it (raises
    :class:`BadEntry` as it does)."""
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
        raise BadEntry(
            f"{length} bytes, the record says {rec.get('length') if isinstance(rec, dict) else '?'}"
        )
    found = Extent(
        str(rec.get("source")),
        int(rec.get("start", -1)),
        int(rec.get("end", -1)),
        str(rec.get("version")),
    )
    if found.key != os.path.basename(path) or (extent is not None and found != extent):
        raise BadEntry("the record names another range or object version")
    if check_sums and not check(fd, length, rec):
        raise BadEntry("checksum mismatch")
    return EntryView(fd, length, path)


def read_entry(path: str, extent: Extent | None = None) -> bytes:
    """The verified bytes of the entry at ``path`` (record, length and digests checked,
    and the record against ``extent`` if given); raises :class:`BadEntry` as
    :func:`open_entry` does."""
    view = open_entry(path, extent)
    try:
        return bytes(view)
    finally:
        view.close()


def write_entry(path: str, extent: Extent, chunks: Iterable[bytes]) -> bytes:
    """Write ``extent``'s bytes from ``chunks`` and their record to ``path``, settled for its
    rename (:func:`~shardwise.storage.cache.verified.settle`); returns the bytes (a
    :class:`StorageError` if they do not add up to its length)."""
    parts: list[bytes] = []
    sums = Sums(extent.length)
    with open(path, "wb") as f:
        for chunk in chunks:
            f.write(chunk)
            sums.feed(chunk)
            parts.append(chunk)
        data = b"".join(parts)
        if len(data) != extent.length:
            raise StorageError(
                f"got {len(data)} bytes of {extent.source} [{extent.start}, {extent.end}), "
                f"expected {extent.length}",
                extent.source,
            )
        f.write(extent.record(sums.text()))
        f.flush()
        settle(f.fileno())
    return data
