"""A token column's row group as a view of the file, when it is laid out for it.

``tokenize`` writes token columns (:mod:`shardwise._tokens`) uncompressed, as
``DELTA_LENGTH_BYTE_ARRAY`` (every value's length first, then every value's bytes back to
back) in one data page per row group. The row group's tokens are then the last bytes of
its column chunk: one contiguous run of the file, the documents' tokens back to back.
:func:`token_view` checks that the chunk is laid out so (one page filling the chunk, no
nulls, the encoding and codec) and returns those bytes as a numpy array: a view of a
memory-mapped file, with nothing decoded or copied. The page's structure is checked as a
reader would need it (the levels, the lengths' header, blocks and miniblock sizes, and the
tokens filling the rest exactly), without unpacking the lengths: the document offsets come
from the caller (the ``num_tokens`` column the token plan also trusts). Any other layout
gives None, and the caller reads the column with Arrow.
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


def _lengths_end(b: memoryview, i: int, count: int) -> int:
    """Where the DELTA_BINARY_PACKED run of ``count`` values starting at ``i`` ends, its
    header, block and miniblock sizes checked (nothing unpacked)."""
    block, i = varint(b, i)
    miniblocks, i = varint(b, i)
    total, i = varint(b, i)
    _, i = varint(b, i)  # the first value
    if total != count or not 0 < miniblocks <= MAX_MINIBLOCKS or block % 128 or block == 0:
        raise Unreadable("a lengths header Arrow would refuse")
    per = block // miniblocks
    if per % 32 or per == 0:
        raise Unreadable("miniblocks of no multiple of 32 values")
    left = total - 1
    while left > 0:
        _, i = varint(b, i)  # the block's smallest delta
        widths = b[i : i + miniblocks]
        if len(widths) < miniblocks:
            raise Unreadable("a block past its page")
        i += miniblocks
        needed = min(miniblocks, -(-left // per))
        for w in widths[:needed]:
            if w > 64:
                raise Unreadable("a miniblock wider than 64 bits")
            i += w * per // 8
        left -= min(left, block)
    if i > len(b):
        raise Unreadable("lengths past their page")
    return i


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
) -> tuple[memoryview, int, int] | None:
    """The chunk's bytes, its first byte in the file and where its tokens start in it, or
    None when the chunk is not laid out for it (see the module docstring)."""
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
        return b, chunk_start(chunk), _lengths_end(b, start, rows)
    except Unreadable:
        return None


def token_span(
    pf: pq.ParquetFile, source: Any, group: int, column: str, itemsize: int
) -> tuple[int, int] | None:
    """Where row group ``group``'s tokens of ``column`` lie in the file: ``(byte offset,
    tokens)`` of ``itemsize`` bytes each, or None when the chunk is not laid out for it
    (see the module docstring)."""
    got = _located(pf, source, group, column)
    if got is None:
        return None
    b, first, end = got
    if (len(b) - end) % itemsize:  # the lengths, then only whole tokens
        return None
    return first + end, (len(b) - end) // itemsize


def token_view(
    pf: pq.ParquetFile, source: Any, group: int, column: str, count: int, dtype: np.dtype
) -> np.ndarray | None:
    """Row group ``group``'s ``count`` tokens of ``column`` as a view of the file (see the
    module docstring), or None when the chunk is not laid out for it."""
    got = _located(pf, source, group, column)
    if got is None:
        return None
    b, _, end = got
    if end + count * dtype.itemsize != len(b):  # the lengths, then exactly the tokens
        return None
    return np.frombuffer(b, dtype, count, end)
