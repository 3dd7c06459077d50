"""A window's string and binary columns: their bytes in window memory, each row a view of its value.

Turning strings into Python objects holds the GIL, so it runs one string at a time
whatever the number of threads, and a whole window's objects are memory the process
has never used before (the kernel maps and zeroes it page by page). On the 2-core
benchmark machine, two million strings of 300 bytes made into objects as their units
were read took 0.5-0.6 s on the GIL; made for one batch of 256 rows at a time, just
before the batch is handed out, the same strings took about 0.14 s (a batch's objects
fit in the cache, and the memory of the batch before is reused for them).

So the numpy and torch fast path keeps a window's text as Arrow bytes until a batch is
cut. As each unit is read, the values of its column are copied (one ``memcpy``, GIL
released) into segments of the window's memory, unit after unit, and each of its rows
gets an Arrow string (or binary) *view* there: 16 bytes giving the value's length and
where it is in which segment (values of up to 12 bytes sit in the view itself). The
unit's own memory is then let go, so the next unit is decoded into memory already
mapped. A piece of the window (its rows in plan order) is one numpy ``take`` of the
views and one cast of them to ``large_string`` (or ``large_binary``), which gathers the
values into the piece's own buffer; each batch's slice of it becomes a numpy array of
Python objects on the training thread (:func:`batch_objects`), as the worker path
makes it.

Measured on the text benchmark (2 million rows of 300 bytes): a piece made this way
took 0.33-0.40 CPU s an epoch in all, where Arrow's ``take`` of ``large_string`` values
by row took 0.55-0.70 s. Keeping each unit's decoded buffers and pointing the views at
them instead of copying made decoding 0.7 s slower (new memory for every unit). pyarrow
has no ``take`` for views, and Python objects made straight from views took 5 times as
long as from ``large_string``: hence the numpy ``take`` and the cast.

Wide values (a unit's average ``WIDE`` bytes or more: images, audio, documents) are the
exception: their views point into the unit's own decoded buffer, which the window keeps,
and their pieces stay views (each batch's objects are made from them, see
:meth:`_Column.piece`). Copying them made the window as much new memory again as the
values, all mapped by the kernel before the first batch of a fresh process: on the
image-bytes shape (100 MB of 50-150 KB values) 26k page faults against 7k, and a first
batch of 0.05-0.07 s against 0.07-0.31 s (alternated fresh processes, load 3); later
epochs, where the copy's window memory is reused, took 0.05-0.09 s against 0.07-0.08 s,
with 13k page faults against 15k (the units' memory is Arrow's, which keeps it).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.memory import map_pages, window_memory

__all__ = ["WindowTexts", "batch_objects", "is_text", "large_text"]

VIEW = 16  # bytes of one view
INLINE = 12  # values of at most this many bytes are held in the view itself
MAX_SEGMENT = 1 << 30  # bytes of values per segment, and at most per unit (in parts beyond)
MAX_VIEW_OFFSET = (1 << 31) - 1  # a view's offset into its buffer is an int32
WIDE = 4096  # values of at least this many bytes on average stay in their unit's buffer


def is_text(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` holds strings or binary values."""
    return (
        pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
    )


def large_text(t: pa.DataType) -> pa.DataType:
    """The type with 64-bit offsets for text columns of type ``t``."""
    return pa.large_binary() if _binary(t) else pa.large_string()


def batch_objects(values: pa.Array) -> np.ndarray:
    """A batch's strings, binary values or structs as a numpy array of Python objects (None
    for nulls).

    Made by ``to_pylist``, not ``to_numpy``: the first ``to_numpy`` of a process imports
    pandas (about 0.3 CPU s, up to a second on a busy machine, all before the first batch of
    a fresh process), and for a batch of 256 strings the two cost the same (about 15 ns a
    string more here)."""
    out = np.empty(len(values), dtype=object)
    out[:] = values.to_pylist()
    return out


def _binary(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _large(t: pa.DataType) -> bool:
    return pa.types.is_large_string(t) or pa.types.is_large_binary(t)


@dataclass
class _Segment:
    data: np.ndarray  # uint8, values back to back
    number: int  # its place among the views' buffers
    used: int = 0


class _Column:
    """One text column of a window: a view per row, and the segments of window memory
    holding the values they point at."""

    def __init__(
        self, t: pa.DataType, n: int, take: Callable[[int], np.ndarray] = window_memory
    ) -> None:
        self.type = large_text(t)
        self.view_type = pa.binary_view() if _binary(t) else pa.string_view()
        self.take = take
        self.n = n
        self.views = take(n * VIEW).view(np.int32).reshape(n, VIEW // 4)
        self.valid: np.ndarray | None = (
            None  # made when a unit has nulls: True for every row before
        )
        self.segments: list[_Segment] = []
        self.buffers: list[pa.Buffer] = []  # the segments' memory, as the views' buffers
        self.rows_seen = self.bytes_seen = 0
        self._lock = threading.Lock()

    def add(self, column: pa.ChunkedArray, at: int) -> None:
        """Copy a unit's ``column`` in, its rows at ``at`` onwards (any thread)."""
        for chunk in column.chunks:
            for part in _parts(chunk):
                self._add(part, at)
                at += len(part)

    def _reserve(self, rows: int, nbytes: int) -> tuple[_Segment, int, int]:
        """Room for ``nbytes`` of values (under the lock): the segment, its number and
        the first byte there. A new segment is sized for the rows still to come."""
        self.rows_seen, self.bytes_seen = self.rows_seen + rows, self.bytes_seen + nbytes
        seg = self.segments[-1] if self.segments else None
        if seg is None or seg.used + nbytes > len(seg.data):
            left = max(self.n - self.rows_seen, 0) * self.bytes_seen // max(self.rows_seen, 1)
            seg = _Segment(
                self.take(max(nbytes, min(MAX_SEGMENT, nbytes + left + left // 8 + (64 << 10)))),
                len(self.buffers),
            )
            self.segments.append(seg)
            self.buffers.append(pa.py_buffer(seg.data))
        at = seg.used
        seg.used += nbytes
        return seg, seg.number, at

    def _add(self, chunk: pa.Array, at: int) -> None:
        k = len(chunk)
        if not k:
            return
        offsets = _offsets(chunk)
        start, end = int(offsets[0]), int(offsets[-1])
        data = chunk.buffers()[2]
        keep = data is not None and end - start >= WIDE * k and end <= MAX_VIEW_OFFSET
        with self._lock:
            if keep:  # wide values: the views point into the unit's own buffer (see above)
                self.rows_seen, self.bytes_seen = self.rows_seen + k, self.bytes_seen + end - start
                seg, number, where = None, len(self.buffers), start
                self.buffers.append(data)
            else:
                seg, number, where = self._reserve(k, end - start)
            if chunk.null_count and self.valid is None:
                self.valid = np.ones(self.n, dtype=np.bool_)
        if seg is not None and end > start and data is not None:  # one memcpy, GIL released
            map_pages(seg.data[where : where + end - start])
            seg.data[where : where + end - start] = np.frombuffer(
                data, dtype=np.uint8, count=end - start, offset=start
            )
        views = chunk.cast(self.view_type)  # values of at most 12 bytes are copied into their view
        dest = self.views[at : at + k]
        map_pages(dest)
        dest[:] = np.frombuffer(
            views.buffers()[1], dtype=np.int32, count=(views.offset + k) * 4
        ).reshape(-1, 4)[views.offset :]
        long = dest[:, 0] > INLINE  # the others point into the unit's buffer: now into the segment
        dest[long, 2] = number
        dest[long, 3] += where - start
        if chunk.null_count:
            assert self.valid is not None
            self.valid[at : at + k] = np.asarray(chunk.is_valid())

    def piece(self, src: np.ndarray) -> pa.Array:
        """The values of the window's rows ``src``, in that order, in a buffer of their own;
        wide values (``WIDE`` bytes or more on average) stay views of the window's buffers:
        each batch's Python objects are made from them, without copying every value once
        more into new memory."""
        views = np.take(self.views, src, axis=0)
        valid = None
        if self.valid is not None:
            mask = self.valid[src]
            valid = None if mask.all() else pa.py_buffer(np.packbits(mask, bitorder="little"))
        arr = pa.Array.from_buffers(
            self.view_type, len(src), [valid, pa.py_buffer(views), *self.buffers]
        )
        return arr if self.bytes_seen >= WIDE * max(self.rows_seen, 1) else arr.cast(self.type)


def _offsets(chunk: pa.Array) -> np.ndarray:
    """The value offsets of ``chunk`` (its own rows, as in its buffer)."""
    dtype = np.int64 if _large(chunk.type) else np.int32
    return np.frombuffer(chunk.buffers()[1], dtype=dtype)[
        chunk.offset : chunk.offset + len(chunk) + 1
    ]


def _parts(chunk: pa.Array) -> list[pa.Array]:
    """``chunk`` in parts of at most ``MAX_SEGMENT`` bytes of values whose offsets fit a
    view (an int32); a column with more is copied into parts of their own first."""
    if len(chunk) == 0:
        return [chunk]
    offsets = _offsets(chunk)
    if int(offsets[-1]) - int(offsets[0]) <= MAX_SEGMENT and int(offsets[-1]) <= MAX_VIEW_OFFSET:
        return [chunk]
    parts, lo = [], 0
    while lo < len(chunk):  # values from lo whose bytes fit in one part (at least one value)
        hi = max(lo + 1, int(np.searchsorted(offsets, offsets[lo] + MAX_SEGMENT, side="right")) - 1)
        parts.append(pa.concat_arrays([chunk.slice(lo, hi - lo)]))  # a copy of just these values
        lo = hi
    return parts


class WindowTexts:
    """The text columns of one window, filled unit by unit (from any thread), each unit's
    rows at their own places of the window (see :mod:`shardwise.loader.batches.arrival`).

    Args:
        schema: the units' schema.
        columns: the positions of its text columns.
        n: the window's rows.
        take: where the views' memory comes from (``nbytes`` -> uint8 array).
    """

    def __init__(
        self,
        schema: pa.Schema,
        columns: list[int],
        n: int,
        take: Callable[[int], np.ndarray] = window_memory,
    ) -> None:
        self.columns = columns
        self._cols = [_Column(schema.field(i).type, n, take) for i in columns]

    def add(self, unit: int, table: pa.Table, at: int) -> None:
        """Write ``unit``'s text columns (of ``table``) at rows ``at`` onwards."""
        for i, col in zip(self.columns, self._cols):
            col.add(table.column(i), at)

    def piece(self, src: np.ndarray) -> list[pa.Array]:
        """The text columns of the window's rows ``src`` (by their place in the units'
        layout), in that order."""
        return [col.piece(src) for col in self._cols]
