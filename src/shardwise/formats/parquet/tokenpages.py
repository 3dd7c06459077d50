"""A token column's row group as a view of the file, when it is laid out for it.

``tokenize`` writes token columns (:mod:`shardwise._tokens`) uncompressed, as
``DELTA_LENGTH_BYTE_ARRAY`` (every value's length first, then every value's bytes back to
back) in one data page per row group. The row group's tokens are then the last bytes of
its column chunk: one contiguous run of the file, the documents' tokens back to back.
:func:`token_view` checks that the chunk is laid out so (one page filling the chunk, no
nulls, the encoding and codec) and returns those bytes as a numpy array: a view of a
memory-mapped file, with nothing decoded or copied. The page's structure is checked as a
reader would need it (the levels, the lengths, and the tokens filling the rest exactly),
and every document's length against the caller's count of its tokens (the ``num_tokens``
column the token plan takes its document offsets from). Any other layout, or a count that
disagrees, gives None, and the caller reads the column with Arrow (which reports the
disagreement, naming the file).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.formats.parquet._chunk import chunk_bytes, chunk_start
from shardwise.formats.parquet._pages import DATA, DATA_V2, as_bytes, read_page
from shardwise.formats.parquet._thrift import Unreadable, varint

__all__ = ["DELTA_LENGTH_BYTE_ARRAY", "token_span", "token_view"]

DELTA_LENGTH_BYTE_ARRAY = 6  # Parquet's Encoding enum
MAX_MINIBLOCKS = 1 << 10


def _leaf(pf: pq.ParquetFile, column: str) -> int | None:
    for i in range(pf.metadata.num_columns):
        if pf.schema.column(i).path == column:
            return i
    return None


def _levels_end(b: memoryview, body: int, rows: int) -> int:
    """Where a v1 page's definition levels (a 4-byte length, then RLE runs) end, when they
    are one run of ``rows`` ones (no document is null); else Unreadable."""
    end = body + 4 + int.from_bytes(b[body : body + 4], "little")
    header, i = varint(b, body + 4)
    if header != rows << 1 or i + 1 != end or end > len(b) or b[i] != 1:
        raise Unreadable("null documents, or levels of another layout")
    return end


def _zigzag(n: int) -> int:
    return (n >> 1) ^ -(n & 1)


def _unpacked(raw: np.ndarray, starts: np.ndarray, width: int, per: int) -> np.ndarray:
    """The miniblocks at byte offsets ``starts`` of ``raw``, ``per`` values of ``width`` bits
    each (least significant first), one row per miniblock."""
    if width == 0:
        return np.zeros((len(starts), per), np.int64)
    packed = raw[starts[:, None] + np.arange(width * per // 8)]
    bits = np.unpackbits(packed, axis=1, bitorder="little").reshape(len(starts), per, width)
    weights = np.left_shift(np.uint64(1), np.arange(width, dtype=np.uint64))
    return (bits.astype(np.uint64) * weights).sum(axis=2).astype(np.int64)


def _delta_values(b: memoryview, i: int, count: int) -> tuple[np.ndarray, int]:
    """The ``count`` values of the DELTA_BINARY_PACKED run starting at ``i`` (its header,
    block and miniblock sizes checked) and where the run ends."""
    block, i = varint(b, i)
    miniblocks, i = varint(b, i)
    total, i = varint(b, i)
    first, i = varint(b, i)
    if total != count or not 0 < miniblocks <= MAX_MINIBLOCKS or block % 128 or block == 0:
        raise Unreadable("a lengths header Arrow would refuse")
    if (block | first) >> 32:  # Arrow reads them as varints of 32 bits
        raise Unreadable("a lengths header Arrow would refuse")
    per = block // miniblocks
    if per % 32 or per == 0:
        raise Unreadable("miniblocks of no multiple of 32 values")
    found: list[tuple[int, int, int]] = []  # (byte offset, width, smallest delta)
    left = total - 1
    while left > 0:
        smallest, i = varint(b, i)  # the block's smallest delta
        widths = b[i : i + miniblocks]
        if len(widths) < miniblocks:
            raise Unreadable("a block past its page")
        i += miniblocks
        for w in widths[: min(miniblocks, -(-left // per))]:
            if w > 64:
                raise Unreadable("a miniblock wider than 64 bits")
            found.append((i, w, _zigzag(smallest)))
            i += w * per // 8
        left -= min(left, block)
    if i > len(b):
        raise Unreadable("lengths past their page")
    # a miniblock of width 0 takes no bytes, however many values it claims: no more of a
    # miniblock's values are unpacked than the run holds (a block of 2**31 was 16 GiB)
    span = min(per, -(-count // 32) * 32)
    return _values(np.frombuffer(b, np.uint8, i), found, span, count, _zigzag(first)), i


def _values(
    raw: np.ndarray, found: list[tuple[int, int, int]], per: int, count: int, first: int
) -> np.ndarray:
    """The run's values from its miniblocks (unpacked width by width)."""
    at = np.array([f[0] for f in found], np.int64)
    widths = np.array([f[1] for f in found], np.int64)
    deltas = np.zeros((len(found), per), np.int64)
    for w in np.unique(widths):
        rows = np.flatnonzero(widths == w)
        deltas[rows] = _unpacked(raw, at[rows], int(w), per)
    deltas += np.array([f[2] for f in found], np.int64)[:, None]
    flat = np.concatenate([np.zeros(1, np.int64), deltas.ravel()])[:count]
    return np.cumsum(flat) + first


def _chunk(chunk: Any, source: Any) -> memoryview:
    """The column chunk's bytes: a slice of the map for a memory-mapped file (Arrow's
    ``read_buffer``; ``read_at`` would copy them), else as the page reader reads them."""
    if not isinstance(source, pa.MemoryMappedFile):
        return chunk_bytes(chunk, source)
    start, size = chunk_start(chunk), chunk.total_compressed_size
    if start < 0 or size < 0 or start + size > source.size():
        raise Unreadable(f"column chunk at {start} of {size} bytes in a file of {source.size()}")
    source.seek(start)
    return as_bytes(source.read_buffer(size))


def _located(
    pf: pq.ParquetFile, source: Any, group: int, column: str
) -> tuple[memoryview, int, int, np.ndarray] | None:
    """The chunk's bytes, its first byte in the file, where its tokens start in it and the
    documents' lengths in bytes, or None when the chunk is not laid out for it (see the
    module docstring)."""
    i = _leaf(pf, column)
    if i is None:
        return None
    rows = pf.metadata.row_group(group).num_rows
    chunk = pf.metadata.row_group(group).column(i)
    encodings = chunk.encodings
    if chunk.compression != "UNCOMPRESSED" or "DELTA_LENGTH_BYTE_ARRAY" not in encodings:
        return None
    try:
        b = _chunk(chunk, source)
        page = read_page(b, 0)
    except Unreadable:
        return None
    single = page.body + page.compressed == len(b) and page.compressed == page.uncompressed
    if not single or page.encoding != DELTA_LENGTH_BYTE_ARRAY or page.num_values != rows:
        return None
    try:
        if page.kind == DATA_V2 and page.num_nulls == 0:
            start = page.body + page.def_length + page.rep_length
        elif page.kind == DATA:
            optional = pf.schema.column(i).max_definition_level > 0
            start = _levels_end(b, page.body, rows) if optional else page.body
        else:
            return None
        lengths, end = _delta_values(b, start, rows)
        return b, chunk_start(chunk), end, lengths
    except Unreadable:
        return None


def _counts(lengths: np.ndarray, itemsize: int, counts: np.ndarray | None) -> bool:
    """Whether the documents' byte lengths are whole tokens, and ``counts`` of them."""
    if (lengths < 0).any() or (lengths % itemsize).any():
        return False
    return counts is None or np.array_equal(lengths // itemsize, counts)


def token_span(
    pf: pq.ParquetFile,
    source: Any,
    group: int,
    column: str,
    itemsize: int,
    counts: np.ndarray | None = None,
) -> tuple[int, int] | None:
    """Where row group ``group``'s tokens of ``column`` lie in the file: ``(byte offset,
    tokens)`` of ``itemsize`` bytes each, or None when the chunk is not laid out for it
    (see the module docstring) or its documents do not hold ``counts`` tokens each."""
    got = _located(pf, source, group, column)
    if got is None:
        return None
    b, first, end, lengths = got
    if (len(b) - end) % itemsize or not _counts(lengths, itemsize, counts):
        return None
    return first + end, (len(b) - end) // itemsize


def token_view(
    pf: pq.ParquetFile,
    source: Any,
    group: int,
    column: str,
    counts: np.ndarray,
    dtype: np.dtype,
) -> np.ndarray | None:
    """Row group ``group``'s tokens of ``column`` as a view of the file (see the module
    docstring), or None when the chunk is not laid out for it or its documents do not hold
    ``counts`` tokens each."""
    got = _located(pf, source, group, column)
    if got is None:
        return None
    b, _, end, lengths = got
    count = int(counts.sum())
    if end + count * dtype.itemsize != len(b) or not _counts(lengths, dtype.itemsize, counts):
        return None  # the lengths, then exactly the tokens, of the documents counted
    return np.frombuffer(b, dtype, count, end)
