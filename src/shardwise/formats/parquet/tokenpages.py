"""A token column's row group as a view of the file, when it is laid out for it.

``tokenize`` writes token columns (:mod:`shardwise._tokens`) uncompressed, as
``DELTA_LENGTH_BYTE_ARRAY`` (every value's length first, then every value's bytes back to
back) in one data page per row group. The row group's tokens are then the last bytes of
its column chunk: one contiguous run of the file, the documents' tokens back to back.
:func:`token_view` checks that the chunk is laid out so (one page filling the chunk, no
nulls, the encoding and codec) and returns those bytes as a numpy array: a view of a
memory-mapped file, with nothing decoded or copied. Any other layout gives None, and the
caller reads the column with Arrow. The document lengths come from the caller (the
``num_tokens`` column the token plan also trusts); the view never reaches outside the page.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.formats.parquet._chunk import chunk_bytes, chunk_start
from shardwise.formats.parquet._pages import DATA, DATA_V2, as_bytes, read_page
from shardwise.formats.parquet._thrift import Unreadable

__all__ = ["DELTA_LENGTH_BYTE_ARRAY", "token_view"]

DELTA_LENGTH_BYTE_ARRAY = 6  # Parquet's Encoding enum


def _leaf(pf: pq.ParquetFile, column: str) -> int | None:
    for i in range(pf.metadata.num_columns):
        if pf.schema.column(i).path == column:
            return i
    return None


def _no_nulls(b: memoryview, body: int, rows: int) -> bool:
    """Whether a v1 page's definition levels (a 4-byte length, then RLE runs) are one run
    of ``rows`` ones: no document is null."""
    end = body + 4 + int.from_bytes(b[body : body + 4], "little")
    header, shift, i = 0, 0, body + 4
    while i < min(end, len(b)) and shift < 64:
        byte = b[i]
        header, shift, i = header | (byte & 0x7F) << shift, shift + 7, i + 1
        if not byte & 0x80:
            break
    return header == rows << 1 and i + 1 == end <= len(b) and b[i] == 1


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


def token_view(
    pf: pq.ParquetFile, source: Any, group: int, column: str, count: int, dtype: np.dtype
) -> np.ndarray | None:
    """Row group ``group``'s ``count`` tokens of ``column`` as a view of the file (see the
    module docstring), or None when the chunk is not laid out for it."""
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
    nbytes = count * dtype.itemsize
    single = page.body + page.compressed == len(b) and page.compressed == page.uncompressed
    if not single or page.encoding != DELTA_LENGTH_BYTE_ARRAY or page.num_values != rows:
        return None
    if page.kind == DATA_V2:
        valid = page.num_nulls == 0
    elif page.kind == DATA:
        optional = pf.schema.column(i).max_definition_level > 0
        valid = not optional or _no_nulls(b, page.body, rows)
    else:
        valid = False
    if not valid or nbytes > page.compressed - 4:  # the lengths' header takes 4 bytes at least
        return None
    return np.frombuffer(b, dtype, count, len(b) - nbytes)
