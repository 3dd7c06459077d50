"""Fixed-size lists of numbers (embeddings, token windows) read straight from their Parquet pages.

Arrow decodes a ``fixed_size_list<float>[64]`` column as a nested list: a repetition
and a definition level per value, turned into offsets and validity, then checked
against the fixed size. On the loader benchmark's text shape (2 million embeddings of
64 floats) that took 0.73-0.98 CPU s of a 1.2-1.5 s decode, on one thread; the same
floats as a flat column without nulls took about 0.16 s. Without nulls, the levels say
nothing a fixed-size list does not already say, so here each page's levels are only
*checked* (the definition levels all at their maximum, the repetition levels opening a
row every ``k`` values; both usually a few runs, see
:mod:`shardwise.formats.parquet._rle_bitpacked`)
and the values are taken as they are: plain (one copy out of the decompressed page),
byte-stream-split or dictionary indices. The same column took 0.48-0.64 s so; the emb
shape's whole scan (128 floats a row), 1.2 CPU s against Arrow's 3.3 s.

Anything else -- nulls, other encodings or codecs, pages splitting a row, a header or
level that does not parse, a count that does not add up -- declines the column
(``None``), and Arrow reads it as before, reporting any damage itself. So this path
returns nothing Arrow would not, or it returns nothing.
"""

from __future__ import annotations

import sys
import zlib
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.formats.parquet._pages import (
    CODECS,
    DATA,
    DATA_V2,
    DICTIONARY,
    Page,
    as_bytes,
    inflate,
    read_page,
)
from shardwise.formats.parquet._rle_bitpacked import check_constant, check_rows, decode

__all__ = ["read_fixed_lists"]

_PHYSICAL = {"FLOAT": ("f", 4), "DOUBLE": ("f", 8), "INT32": ("iu", 4), "INT64": ("iu", 8)}
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY, BYTE_STREAM_SPLIT = 0, 2, 3, 8, 9
_ERRORS = (
    ValueError,
    IndexError,
    KeyError,
    TypeError,
    AssertionError,
    OverflowError,
    MemoryError,
    RecursionError,
    pa.ArrowException,
    OSError,
    zlib.error,
)


def read_fixed_lists(pf: Any, source: Any, group: int, names: list[str]) -> dict[str, pa.Array]:
    """The columns of ``names`` in row group ``group`` of ``pf`` (a ``ParquetFile`` over
    ``source``) that are fixed-size lists of numbers without nulls, decoded here; the
    others (and any this path declines) are left out, for Arrow to read."""
    out: dict[str, pa.Array] = {}
    schema = pf.schema_arrow
    if (
        sys.byteorder != "little"
        or len(set(schema.names)) != len(schema.names)
        or sum(_leaves(f.type) for f in schema) != pf.metadata.num_columns
    ):
        return out
    leaf = 0
    for field in schema:
        width = _leaves(field.type)
        if field.name in names and width == 1 and _eligible(field.type):
            array = _column(pf, source, group, leaf, field)
            if array is not None:
                out[field.name] = array
        leaf += width
    return out


def _leaves(t: pa.DataType) -> int:
    """How many Parquet columns hold a field of type ``t``."""
    if isinstance(t, pa.BaseExtensionType):
        return _leaves(t.storage_type)
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return _leaves(t.value_type)
    return 1


def _eligible(t: pa.DataType) -> bool:
    if not pa.types.is_fixed_size_list(t) or t.list_size < 1:
        return False
    v = t.value_type
    return (pa.types.is_floating(v) or pa.types.is_integer(v)) and v.bit_width in (32, 64)


def _column(pf: Any, source: Any, group: int, leaf: int, field: pa.Field) -> pa.Array | None:
    try:
        meta = pf.metadata.row_group(group)
        rows = meta.num_rows
        chunk, desc = meta.column(leaf), pf.schema.column(leaf)
        if desc.path.split(".")[0] != field.name or desc.max_repetition_level != 1:
            return None
        dtype = np.dtype(field.type.value_type.to_pandas_dtype())
        kinds, size = _PHYSICAL.get(desc.physical_type, ("", 0))
        if (
            dtype.kind not in kinds
            or dtype.itemsize != size
            or chunk.num_values != rows * field.type.list_size
        ):
            return None
        values = _values(
            chunk, source, desc.max_definition_level, field.type.list_size, rows, dtype
        )
    except _ERRORS:
        return None
    if values is None:
        return None
    flat = pa.Array.from_buffers(field.type.value_type, len(values), [None, pa.py_buffer(values)])
    return pa.FixedSizeListArray.from_arrays(flat, type=field.type)


def _values(
    chunk: Any, source: Any, max_def: int, k: int, rows: int, dtype: np.dtype
) -> np.ndarray | None:
    """The chunk's values, or None where a page is not one this path reads."""
    codec = chunk.compression
    if codec not in CODECS:
        return None
    b = as_bytes(source.read_at(chunk.total_compressed_size, _start(chunk)))
    # from Arrow's memory pool, which serves it from the memory of units let go before
    # (new memory from the kernel would be mapped and zeroed page by page)
    out = np.frombuffer(pa.allocate_buffer(rows * k * dtype.itemsize), dtype=dtype)
    at, pos, dictionary = 0, 0, None
    while pos < len(b) and at < len(out):
        page = read_page(b, pos)
        body, pos = b[page.body : page.body + page.compressed], page.body + page.compressed
        if len(body) != page.compressed:
            return None
        if page.kind == DICTIONARY and dictionary is None and at == 0:
            dictionary = _plain(inflate(body, page.uncompressed, codec), page.num_values, dtype)
            if dictionary is None or page.encoding not in (PLAIN, PLAIN_DICTIONARY):
                return None
            continue
        n = page.num_values
        if page.kind not in (DATA, DATA_V2) or n == 0 or n % k or at + n > len(out):
            return None
        if not _data(page, body, codec, max_def, k, dictionary, out[at : at + n]):
            return None
        at += n
    return out if at == len(out) else None


def _start(chunk: Any) -> int:
    """Where the chunk's pages start: at its dictionary page if it has one before its
    first data page (as Arrow reads it), else at its first data page."""
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
    return (
        first
        if first is not None and 0 < first < chunk.data_page_offset
        else chunk.data_page_offset
    )


def _data(
    page: Page,
    body: memoryview,
    codec: str,
    max_def: int,
    k: int,
    dictionary: np.ndarray | None,
    dest: np.ndarray,
) -> bool:
    """One data page's values written to ``dest``, once its levels are checked (False:
    the page is not one this path reads)."""
    n = page.num_values
    if page.kind == DATA:
        if page.rep_encoding != RLE or page.def_encoding != RLE:
            return False
        raw = inflate(body, page.uncompressed, codec)
        rep_len = int.from_bytes(raw[:4], "little")
        rep, rest = raw[4 : 4 + rep_len], raw[4 + rep_len :]
        def_len = int.from_bytes(rest[:4], "little") if max_def else 0
        levels, values = (
            (rest[4 : 4 + def_len], rest[4 + def_len :]) if max_def else (rest[:0], rest)
        )
    else:
        if page.num_nulls or page.num_rows * k != n:
            return False
        levels_len = page.rep_length + page.def_length
        if levels_len > len(body):
            return False
        rep, levels = body[: page.rep_length], body[page.rep_length : levels_len]
        values = inflate(
            body[levels_len:],
            page.uncompressed - levels_len,
            codec if page.is_compressed else "UNCOMPRESSED",
        )
    if not check_rows(rep, n, k) or not check_constant(levels, max_def.bit_length(), n, max_def):
        return False
    return _decoded(values, page.encoding, dictionary, dest)


def _decoded(
    values: memoryview, encoding: int, dictionary: np.ndarray | None, dest: np.ndarray
) -> bool:
    n, size = len(dest), dest.itemsize
    if encoding == PLAIN and len(values) >= n * size:
        dest[:] = np.frombuffer(values, dtype=dest.dtype, count=n)
        return True
    if encoding == BYTE_STREAM_SPLIT and len(values) == n * size:
        streams = np.frombuffer(values, dtype=np.uint8, count=n * size).reshape(size, n)
        dest.view(np.uint8).reshape(n, size)[:] = streams.T
        return True
    if encoding in (RLE_DICTIONARY, PLAIN_DICTIONARY) and dictionary is not None and len(values):
        index = decode(values[1:], values[0], n)
        if len(index) != n or (n and int(index.max()) >= len(dictionary)):
            return False
        np.take(dictionary, index, out=dest)
        return True
    return False


def _plain(values: memoryview, n: int, dtype: np.dtype) -> np.ndarray | None:
    if len(values) < n * dtype.itemsize:
        return None
    return np.frombuffer(values, dtype=dtype, count=n)
