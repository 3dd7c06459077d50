"""A unit's tokens as a view of its Parquet file, where ``tokenize`` laid them out for it.

A row group of a token column written by ``tokenize`` is one uncompressed
``DELTA_LENGTH_BYTE_ARRAY`` page whose last bytes are the documents' tokens back to back
(:mod:`shardwise.formats.parquet.tokenpages`). :func:`mapped_tokens` opens the unit's file
(memory-mapped when local, ranged reads elsewhere), reads the unit's ``num_tokens`` (the
document offsets) and returns the tokens as a view of those bytes: nothing decoded, nothing
copied until a sequence is cut out of them. Any other layout, a format other than Parquet
or a file that does not read gives None, and the caller reads the unit with Arrow.
"""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise._tokens import TokenInfo
from shardwise.errors import ShardwiseError
from shardwise.formats.parquet.tokenpages import token_view
from shardwise.storage.localfs import mappable
from shardwise.storage.paths import open_arrow_input

__all__ = ["OpenFiles", "file_lengths", "mapped_local", "mapped_tokens", "unit_path"]

KEEP_FILES = 4  # files a stream's pass keeps open for its next units
#: local files up to which their lengths are read on the calling thread (a local footer
#: reads in less than starting a thread can take on a busy machine)
SERIAL_FILES = 16


def _where(index: Any, unit: int) -> tuple[Any, Any] | None:
    """The unit's (DatasetIndex, Unit) when it is a Parquet row group, else None."""
    if hasattr(index, "locate"):  # a MixedIndex: the unit of one source
        s, local = index.locate(unit)
        index, unit = index.indexes[s], local
    if index.format != "parquet":
        return None
    return index, index.units[unit]


def _lengths(pf: pq.ParquetFile, group: int, column: str) -> np.ndarray | None:
    """The row group's document lengths (its ``column`` of counts), None if any is null
    or negative or they are not one per row."""
    col = pf.read_row_group(group, columns=[column], use_threads=False).column(0)
    parts = [c.cast(pa.int64()) for c in col.chunks if len(c)]
    if any(c.null_count for c in parts):
        return None
    lengths = np.concatenate(
        [np.frombuffer(c.buffers()[1], np.int64, len(c), c.offset * 8) for c in parts]
        or [np.zeros(0, np.int64)]
    )
    ok = len(lengths) == pf.metadata.row_group(group).num_rows and not (lengths < 0).any()
    return lengths if ok else None


def unit_path(index: Any, unit: int) -> str | None:
    """The file of unit ``unit`` when it is a Parquet row group, else None."""
    where = _where(index, unit)
    return None if where is None else str(where[1].path)


def mapped_local(path: str) -> bool:
    """Whether ``path`` is a file :func:`open_arrow_input` memory-maps (on this machine)."""
    if "://" in path and not path.startswith("file://"):
        return False
    return mappable(path.removeprefix("file://"))


class OpenFiles:
    """The last few files units were mapped from, each opened once (its footer parsed once
    for all its units), for the units one pass of a stream reads. Threads reading units of
    one file take turns on it (:func:`token_view` seeks the shared file)."""

    def __init__(self, keep: int = KEEP_FILES) -> None:
        self.keep = keep
        self._files: OrderedDict[str, tuple[Any, pq.ParquetFile, threading.Lock]] = OrderedDict()
        self._lock = threading.Lock()

    def open(self, path: str, options: dict[str, Any]) -> tuple[Any, pq.ParquetFile, Any]:
        """``path`` opened for Arrow, its ``ParquetFile`` and the lock to read it under."""
        with self._lock:
            got = self._files.get(path)
            if got is not None:
                self._files.move_to_end(path)
                return got
        source = open_arrow_input(path, **options)
        got = (source, pq.ParquetFile(source), threading.Lock())
        with self._lock:  # a thread that opened it at the same time keeps its own
            self._files[path] = got
            while len(self._files) > self.keep:
                self._files.popitem(last=False)
        return got


def mapped_tokens(
    index: Any,
    unit: int,
    column: str,
    count_column: str,
    info: TokenInfo,
    lengths: np.ndarray | None = None,
    files: OpenFiles | None = None,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Unit ``unit``'s flat tokens (a view of its file) and ``documents + 1`` offsets, or
    None when the unit is not laid out for it (see the module docstring). ``lengths``: the
    unit's ``count_column`` when the caller read it already (not read again); ``files``:
    files kept open for the next units."""
    where = _where(index, unit)
    if where is None:
        return None
    ix, u = where
    try:
        if files is None:
            source = open_arrow_input(u.path, **ix.storage_options)
            pf, lock = pq.ParquetFile(source), contextlib.nullcontext()
        else:
            source, pf, lock = files.open(u.path, ix.storage_options)
        with lock:
            if lengths is None or len(lengths) != pf.metadata.row_group(u.index).num_rows:
                lengths = _lengths(pf, u.index, count_column)
            if lengths is None:
                return None
            offsets = np.zeros(len(lengths) + 1, np.int64)
            np.cumsum(lengths, out=offsets[1:])
            tokens = token_view(pf, source, u.index, column, lengths, np.dtype(info.dtype))
    except (OSError, ValueError, pa.ArrowException, ShardwiseError):
        return None  # Arrow's read of the unit retries, or reports what is wrong with it
    return None if tokens is None else (tokens, offsets)


def _file_lengths(path: str, options: dict[str, Any], groups: list[int], column: str) -> list[Any]:
    source = open_arrow_input(path, **options)
    pf = pq.ParquetFile(source)
    return [_lengths(pf, g, column) for g in groups]


def file_lengths(index: Any, column: str, threads: int) -> list[np.ndarray] | None:
    """Every unit's document lengths (its ``column`` of counts), each Parquet file opened
    once for all its units, on ``threads`` threads; None when a unit is no Parquet row
    group or a file does not read so (the caller reads unit by unit, and reports)."""
    where = [_where(index, u) for u in range(len(index.units))]
    if any(w is None for w in where):
        return None
    files: dict[tuple[int, str], list[int]] = {}
    for u, (ix, unit) in enumerate(w for w in where if w is not None):
        files.setdefault((id(ix), unit.path), []).append(u)
    jobs = list(files.values())
    out: list[np.ndarray | None] = [None] * len(where)

    def read(units: list[int]) -> list[Any]:
        ix, first = where[units[0]]  # type: ignore[misc]
        groups = [where[u][1].index for u in units]  # type: ignore[index]
        return _file_lengths(first.path, ix.storage_options, groups, column)

    local = all("://" not in where[units[0]][1].path for units in jobs)  # type: ignore[index]
    threads = 1 if local and len(jobs) <= SERIAL_FILES else threads
    try:
        for units, got in zip(jobs, _map(read, jobs, threads)):
            for u, lengths in zip(units, got):
                out[u] = lengths
    except (OSError, ValueError, pa.ArrowException, ShardwiseError):
        return None
    return None if any(x is None for x in out) else [x for x in out if x is not None]


def _map(read: Callable[[list[int]], list[Any]], jobs: list[list[int]], threads: int) -> list[Any]:
    """``read`` of every job, on ``threads`` threads, or on this one for one thread or
    one job."""
    if threads <= 1 or len(jobs) <= 1:
        return [read(j) for j in jobs]
    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(read, jobs))
