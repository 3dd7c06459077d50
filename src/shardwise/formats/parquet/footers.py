"""Parquet footers parsed once per process: a local file opened again (one unit read after
another of the same file, a head and then its rest) is given the metadata parsed at its
last open instead of Arrow parsing its footer again.

Parsing the footer is most of the cost of opening a file, and it grows with the file's row
groups and columns (a footer of 200 row groups of 40 columns, 860 KB, took 5 ms to parse
here; opening with the metadata given, 1.2 ms), while a unit read reads one row group. So
a file of many small row groups (100-row groups of images are common) paid for its whole
footer at every unit read.

A footer is reused only when the file's last bytes are the very bytes it was parsed from
(the footer and its length; compared at each open, a read of the mapped file), so a file
replaced or rewritten in place is parsed afresh: the metadata given is always what Arrow
would parse. Only local files (memory-mapped or native) are kept; anything else, an
encrypted footer, or one Arrow cannot parse is opened as before, and Arrow reports what
is wrong with it. At most :data:`KEEP_BYTES` of footers are kept, the least recently
opened let go first.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["KEEP_BYTES", "ParsedFile", "open_parquet"]

#: the stored footers kept, in bytes (their parsed metadata takes about 8 times as much)
KEEP_BYTES = 4 << 20

_MAGIC = b"PAR1"


class _Kept(NamedTuple):
    size: int
    footer: bytes
    metadata: pq.FileMetaData
    schema: pa.Schema


class ParsedFile(pq.ParquetFile):
    """A ``ParquetFile`` opened with metadata parsed before, and its Arrow schema."""

    def __init__(self, source: Any, metadata: pq.FileMetaData, schema: pa.Schema) -> None:
        super().__init__(source, metadata=metadata)
        self._schema = schema

    @property
    def schema_arrow(self) -> pa.Schema:
        """The file's Arrow schema (worked out once, at the footer's first parse)."""
        return self._schema


class _Footers:
    def __init__(self, keep_bytes: int) -> None:
        self.keep_bytes = keep_bytes
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.parsed = 0  # footers parsed by Arrow (for tests)
        self.reused = 0

    def open(self, path: str, source: Any) -> pq.ParquetFile:
        footer = _footer(source)
        if footer is None:
            return pq.ParquetFile(source)
        size = source.size()
        with self._lock:
            kept = self._kept.get(path)
            if kept is not None:
                self._kept.move_to_end(path)
        if kept is not None and kept.size == size and kept.footer == footer:
            with self._lock:
                self.reused += 1
            return ParsedFile(source, kept.metadata, kept.schema)
        pf = pq.ParquetFile(source)
        with self._lock:
            self.parsed += 1
        self._keep(path, _Kept(size, footer, pf.metadata, pf.schema_arrow))
        return pf

    def _keep(self, path: str, kept: _Kept) -> None:
        if len(kept.footer) > self.keep_bytes:
            return
        with self._lock:
            old = self._kept.pop(path, None)
            self._bytes -= len(old.footer) if old is not None else 0
            self._kept[path] = kept
            self._bytes += len(kept.footer)
            while self._bytes > self.keep_bytes:
                _, gone = self._kept.popitem(last=False)
                self._bytes -= len(gone.footer)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0


def _footer(source: Any) -> bytes | None:
    """The footer's bytes with their length and magic (the file's last ``n + 8`` bytes),
    or None: not a local file, or no plain footer there (Arrow reports it)."""
    if not isinstance(source, (pa.MemoryMappedFile, pa.OSFile)):
        return None
    size = source.size()
    if size < 12:
        return None
    tail = bytes(source.read_at(8, size - 8))
    n = int.from_bytes(tail[:4], "little")
    if tail[4:] != _MAGIC or n + 12 > size:
        return None
    return bytes(source.read_at(n + 8, size - n - 8))


_FOOTERS = _Footers(KEEP_BYTES)


def _after_fork() -> None:  # a lock held by another thread at the fork is never released
    _FOOTERS._lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def open_parquet(path: str, source: Any) -> pq.ParquetFile:
    """``source`` (the file at ``path``, opened for Arrow) as a ``ParquetFile``, its
    footer parsed only if it is not the one parsed at the last open of ``path``."""
    return _FOOTERS.open(path, source)
