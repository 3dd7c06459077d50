"""Wide binary and string values (images, audio, documents) gathered in one copy.

Arrow's ``take`` across a window's units costs up to three copies of every value: a take
per unit, the parts joined, and a second take to put the rows back in piece order. For
values of :data:`WIDE` bytes or more on average, the bytes are the cost: here each row's
value is copied once, straight from its unit's buffer to its place in the piece (one
``memcpy`` per row, a Python step per row that is small next to the value), and the
piece's offsets and validity are computed with numpy. Narrow values (ids, short text) keep
Arrow's take, whose per-row cost is lower.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["WIDE", "take_wide"]

WIDE = 4096  # bytes per value on average from which values are gathered one by one
_LARGE = {pa.large_binary(), pa.large_string()}
_TYPES = {pa.binary(), pa.string(), *_LARGE}
_INT32_MAX = (1 << 31) - 1


class _Sources:
    """Where each row's value is: its buffer, first byte and length (0 for a null)."""

    def __init__(self, n: int) -> None:
        self.buffer = np.zeros(n, np.int64)
        self.start = np.zeros(n, np.int64)
        self.length = np.zeros(n, np.int64)
        self.valid = np.ones(n, np.bool_)
        self.datas: list[np.ndarray] = []

    def add(self, chunk: pa.Array, at: np.ndarray, local: np.ndarray) -> None:
        """Rows ``at`` of the piece are rows ``local`` of ``chunk``."""
        width = np.int64 if chunk.type in _LARGE else np.int32
        validity, offsets_buf, data_buf = chunk.buffers()
        offsets = np.frombuffer(offsets_buf, width, len(chunk) + 1 + chunk.offset)
        idx = local + chunk.offset
        self.start[at] = offsets[idx]
        self.length[at] = offsets[idx + 1] - offsets[idx]
        if chunk.null_count:
            bits = np.unpackbits(np.frombuffer(validity, np.uint8), bitorder="little")
            self.valid[at] = bits[idx].astype(np.bool_)
        self.buffer[at] = len(self.datas)
        self.datas.append(
            np.empty(0, np.uint8) if data_buf is None else np.frombuffer(data_buf, np.uint8)
        )


def take_wide(
    columns: dict[int, pa.ChunkedArray], unit_ids: np.ndarray, rows: np.ndarray
) -> pa.Array | None:
    """Rows ``rows[i]`` of unit ``unit_ids[i]``'s column (``columns[unit]``), in that
    order, as one array of the column's type; None where the values are narrow (or of
    another type, or would not fit 32-bit offsets): Arrow's take does those."""
    t = next(iter(columns.values())).type
    if t not in _TYPES or any(c.type != t for c in columns.values()) or not len(rows):
        return None
    if sum(c.nbytes for c in columns.values()) < WIDE * sum(len(c) for c in columns.values()):
        return None  # narrow on average in the units
    src = _locate(columns, unit_ids, rows)
    src.length[~src.valid] = 0
    total = int(src.length.sum())
    if total < WIDE * len(rows) or (t not in _LARGE and total > _INT32_MAX):
        return None
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(src.length, out=offsets[1:])
    data = pa.allocate_buffer(total)
    out = np.frombuffer(data, np.uint8)
    for o, b, s, n in zip(
        offsets.tolist(), src.buffer.tolist(), src.start.tolist(), src.length.tolist()
    ):
        if n:
            out[o : o + n] = src.datas[b][s : s + n]
    nulls = len(rows) - int(src.valid.sum())
    validity = pa.py_buffer(np.packbits(src.valid, bitorder="little")) if nulls else None
    width = np.int64 if t in _LARGE else np.int32
    bufs = [validity, pa.py_buffer(offsets.astype(width)), data]
    return pa.Array.from_buffers(t, len(rows), bufs, nulls)


def _locate(
    columns: dict[int, pa.ChunkedArray], unit_ids: np.ndarray, rows: np.ndarray
) -> _Sources:
    """Each row's chunk, buffer, first byte and length."""
    src = _Sources(len(rows))
    for unit in np.unique(unit_ids).tolist():
        at = np.flatnonzero(unit_ids == unit)
        col = columns[unit]
        bounds = np.cumsum([0, *(len(c) for c in col.chunks)])
        picked = np.asarray(rows[at], np.int64)
        which = np.searchsorted(bounds, picked, side="right") - 1
        for k in np.unique(which).tolist():
            here = which == k
            src.add(col.chunks[k], at[here], picked[here] - bounds[k])
    return src
