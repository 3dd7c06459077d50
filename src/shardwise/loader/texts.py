"""A window's string and binary columns, kept as bytes until a batch is handed out.

Turning strings into Python objects holds the GIL, so it runs one string at a time
whatever the number of threads, and a whole window's objects are memory the process
has never used before (the kernel maps and zeroes it page by page). On the 2-core
benchmark machine, two million strings of 300 bytes made into objects as their units
were read took 0.5-0.6 s on the GIL; made for one batch of 256 rows at a time, just
before the batch is handed out, the same strings took about 0.14 s (a batch's objects
fit in the cache, and the memory of the batch before is reused for them).

So the numpy and torch fast path keeps a window's text as bytes: as each unit is read,
the values of its column are copied (one ``memcpy``, GIL released) into segments of
the window's memory, unit after unit, noting for each of the unit's rows the segment
and the value. Once every unit is in, a piece of the window (its rows in plan order)
is one Arrow ``take`` per segment (usually one in all); each batch's slice of it becomes a numpy array of
Python objects on the training thread (:func:`batch_objects`), as the worker path
makes it.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from shardwise.loader.memory import map_pages, window_memory

__all__ = ["WindowTexts", "batch_objects", "is_text", "large_text"]

MAX_SEGMENT = 1 << 30  # bytes of values per segment, unless one unit has more


def is_text(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds strings or binary values."""
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t))


def large_text(t: pa.DataType) -> pa.DataType:
    """The type with 64-bit offsets for text columns of type ``t``."""
    return pa.large_binary() if pa.types.is_binary(t) or pa.types.is_large_binary(t) else pa.large_string()


def batch_objects(values: pa.Array) -> np.ndarray:
    """A batch's strings or binary values as a numpy array of Python objects (None for nulls)."""
    return values.to_numpy(zero_copy_only=False)


@dataclass
class _Segment:
    data: np.ndarray  # uint8, values back to back
    used: int = 0
    rows: int = 0
    offsets: list[np.ndarray] = field(default_factory=list)  # per unit, int64, ends of its values
    valid: list[np.ndarray | None] = field(default_factory=list)  # per unit, or None: no nulls


class _Column:
    """One text column of a window: its segments and, for each row, where its value is."""

    def __init__(self, t: pa.DataType, n: int, take: Callable[[int], np.ndarray] = window_memory) -> None:
        self.type = large_text(t)
        self.take = take
        self.n = n
        self.segments: list[_Segment] = []
        self.segment_of_row = np.zeros(n, dtype=np.int32)
        self.value_of_row = np.zeros(n, dtype=np.int64)
        self.arrays: list[pa.Array] = []
        self.rows_seen = self.bytes_seen = 0

    def reserve(self, rows: int, nbytes: int) -> tuple[_Segment, int, int, int, int]:
        """Room for a unit's values (call under the lock): its segment and that segment's
        number, its first byte there, its first value's number and its slot."""
        self.rows_seen, self.bytes_seen = self.rows_seen + rows, self.bytes_seen + nbytes
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.used + nbytes > len(seg.data):
            left = max(self.n - self.rows_seen, 0) * self.bytes_seen // max(self.rows_seen, 1)
            seg = _Segment(self.take(max(nbytes, min(MAX_SEGMENT, nbytes + left + left // 8 + (64 << 10)))))
            self.segments.append(seg)
        at, first, slot = seg.used, seg.rows, len(seg.offsets)
        seg.used += nbytes
        seg.rows += rows
        seg.offsets.append(np.empty(0, dtype=np.int64))  # filled by the writer
        seg.valid.append(None)
        return seg, len(self.segments) - 1, at, first, slot

    def finish(self) -> None:
        """The segments as Arrow arrays (zero-copy), once every unit is written."""
        for seg in self.segments[len(self.arrays):]:
            offsets = np.concatenate([np.zeros(1, dtype=np.int64), *seg.offsets])
            valid = None
            if any(v is not None for v in seg.valid):
                mask = np.concatenate([v if v is not None else np.ones(len(o), dtype=np.bool_)
                                       for v, o in zip(seg.valid, seg.offsets)])
                valid = pa.py_buffer(np.packbits(mask, bitorder="little"))
            self.arrays.append(pa.Array.from_buffers(self.type, len(offsets) - 1,
                                                     [valid, pa.py_buffer(offsets), pa.py_buffer(seg.data)]))

    def piece(self, src: np.ndarray) -> pa.Array:
        """The values of the window's rows ``src``, in that order."""
        values = self.value_of_row[src]
        if len(self.arrays) == 1:
            return self.arrays[0].take(pa.array(values))
        segs = self.segment_of_row[src]
        order = np.argsort(segs, kind="stable")
        bounds = np.searchsorted(segs[order], np.arange(len(self.arrays) + 1))
        parts = [self.arrays[s].take(pa.array(values[order[a:b]]))
                 for s, (a, b) in enumerate(itertools.pairwise(bounds)) if b > a]
        back = np.empty(len(order), dtype=np.int64)
        back[order] = np.arange(len(order))
        return pa.concat_arrays(parts).take(pa.array(back))


class WindowTexts:
    """The text columns of one window, filled unit by unit (from any thread), each unit's
    rows at their own places of the window (see :mod:`shardwise.loader.arrival`).

    Args:
        schema: the units' schema.
        columns: the positions of its text columns.
        n: the window's rows.
        take: where the values' memory comes from (``nbytes`` -> uint8 array).
    """

    def __init__(self, schema: pa.Schema, columns: list[int], n: int,
                 take: Callable[[int], np.ndarray] = window_memory) -> None:
        self.columns = columns
        self._cols = [_Column(schema.field(i).type, n, take) for i in columns]
        self._lock = threading.Lock()

    def add(self, unit: int, table: pa.Table, at: int) -> None:
        """Copy ``unit``'s text values in (``table``), its rows to rows ``at`` onwards."""
        for i, col in zip(self.columns, self._cols):
            arr = table.column(i).combine_chunks()
            offsets = np.frombuffer(arr.buffers()[1], dtype=np.int64 if _large(arr.type) else np.int32)
            offsets = offsets[arr.offset : arr.offset + len(arr) + 1]
            start, end = int(offsets[0]), int(offsets[-1])
            with self._lock:
                seg, number, where, first, slot = col.reserve(len(arr), end - start)
            data = arr.buffers()[2]
            if end > start and data is not None:
                map_pages(seg.data[where : where + end - start])
                seg.data[where : where + end - start] = np.frombuffer(data, dtype=np.uint8, count=end - start,
                                                                      offset=start)
            seg.offsets[slot] = offsets[1:].astype(np.int64) - start + where
            seg.valid[slot] = np.asarray(arr.is_valid()) if arr.null_count else None
            col.segment_of_row[at : at + len(arr)] = number
            col.value_of_row[at : at + len(arr)] = np.arange(first, first + len(arr))

    def finish(self) -> None:
        """Called once every unit is in: the segments become Arrow arrays."""
        for col in self._cols:
            col.finish()

    def piece(self, src: np.ndarray) -> list[pa.Array]:
        """The text columns of the window's rows ``src`` (by their place in the units'
        layout), in that order."""
        return [col.piece(src) for col in self._cols]


def _large(t: pa.DataType) -> bool:
    return pa.types.is_large_string(t) or pa.types.is_large_binary(t)
