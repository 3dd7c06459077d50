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
level that does not parse, a count that does not add up -- declines the column: an
:class:`~shardwise.formats.parquet._pages.Unreadable` with its reason, logged at debug level, and
Arrow reads the column as before, reporting any damage itself. So this path returns
nothing Arrow would not, or it returns nothing; any other exception is a bug and
propagates. Memory stays bounded on any input: the chunk's range is checked against the
file's size, every page header is read before anything is decompressed (the values add
up to the row group's, each page's sizes are bounded by its values), and no
decompression produces more than its header declares. ``SHARDWISE_PAGE_READER=0`` turns
this path off (see :func:`page_reader_enabled`).

A range of rows can be read alone (``rows=(lo, hi)``, for a unit read in two parts,
:mod:`shardwise.loader.read.unit_heads`): every page header is still checked, but only
the pages holding those rows are decompressed, checked and copied (a page across a bound
is decoded whole and cut), so two reads of adjacent ranges decode each page once, or
twice for the one page across their bound.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.formats.parquet._chunk import allocate, chunk_bytes, page_headers
from shardwise.formats.parquet._leaves import read_leaves
from shardwise.formats.parquet._pages import DATA, DATA_V2, DICTIONARY, Page, Unreadable, inflate
from shardwise.formats.parquet._rle_bitpacked import check_constant, check_rows, decode

__all__ = ["list_column", "numbers", "page_reader_enabled", "read_fixed_lists"]

log = logging.getLogger(__name__)
_PHYSICAL = {"FLOAT": ("f", 4), "DOUBLE": ("f", 8), "INT32": ("iu", 4), "INT64": ("iu", 8)}
PLAIN, PLAIN_DICTIONARY, RLE, RLE_DICTIONARY, BYTE_STREAM_SPLIT = 0, 2, 3, 8, 9
ENV = "SHARDWISE_PAGE_READER"


def page_reader_enabled() -> bool:
    """Whether fixed-size lists are read from their pages: yes unless the environment
    says ``SHARDWISE_PAGE_READER=0`` (read at each call, so a test or a job can switch it)."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def read_fixed_lists(
    pf: Any, source: Any, group: int, names: list[str], rows: tuple[int, int] | None = None
) -> dict[str, pa.Array]:
    """The columns of ``names`` in row group ``group`` of ``pf`` (a ``ParquetFile`` over
    ``source``) that are fixed-size lists of numbers without nulls, decoded here; the
    others (and any this path declines) are left out, for Arrow to read. ``rows``
    ``(lo, hi)``: only the row group's rows ``lo`` to ``hi`` (see the module docstring)."""
    return read_leaves(pf, source, group, names, rows, _eligible, _column)


def _eligible(t: pa.DataType) -> bool:
    return pa.types.is_fixed_size_list(t) and t.list_size >= 1 and numbers(t.value_type)


def numbers(v: pa.DataType) -> bool:
    """Whether list values of type ``v`` are numbers the list readers take (32 or 64 bits)."""
    return (pa.types.is_floating(v) or pa.types.is_integer(v)) and v.bit_width in (32, 64)


def list_column(
    pf: Any, group: int, leaf: int, field: pa.Field, wanted: tuple[int, int] | None
) -> tuple[int, int, int, Any, np.dtype]:
    """:func:`column_rows` of a list of numbers nested once (Unreadable: another nesting,
    or values of another type than the schema's), with its values' numpy type."""
    rows, lo, hi, chunk, desc = column_rows(pf, group, leaf, wanted)
    if desc.path.split(".")[0] != field.name or desc.max_repetition_level != 1:
        raise Unreadable("a list of another nesting")
    dtype = np.dtype(field.type.value_type.to_pandas_dtype())
    kinds, size = _PHYSICAL.get(desc.physical_type, ("", 0))
    if dtype.kind not in kinds or dtype.itemsize != size:
        raise Unreadable("values of another type than the schema's")
    return rows, lo, hi, (chunk, desc), dtype


def _column(
    pf: Any, source: Any, group: int, leaf: int, field: pa.Field, wanted: tuple[int, int] | None
) -> pa.Array:
    rows, lo, hi, (chunk, desc), dtype = list_column(pf, group, leaf, field, wanted)
    k = field.type.list_size
    if chunk.num_values != rows * k:
        raise Unreadable("values of another count than the schema's")
    b = chunk_bytes(chunk, source)
    values = _values(chunk, b, desc.max_definition_level, k, rows, dtype, (lo * k, hi * k))
    flat = pa.Array.from_buffers(field.type.value_type, len(values), [None, pa.py_buffer(values)])
    return pa.FixedSizeListArray.from_arrays(flat, type=field.type)


def column_rows(
    pf: Any, group: int, leaf: int, wanted: tuple[int, int] | None
) -> tuple[int, int, int, Any, Any]:
    """Row group ``group``'s row count, the rows ``wanted`` of it (all: None) as ``lo``,
    ``hi``, and its column ``leaf``'s chunk metadata and descriptor."""
    meta = pf.metadata.row_group(group)
    rows = meta.num_rows
    lo, hi = wanted if wanted is not None else (0, rows)
    if not 0 <= lo <= hi <= rows:
        raise Unreadable(f"rows {lo} to {hi} of a row group of {rows}")
    return rows, lo, hi, meta.column(leaf), pf.schema.column(leaf)


def _values(
    chunk: Any,
    b: memoryview,
    max_def: int,
    k: int,
    rows: int,
    dtype: np.dtype,
    wanted: tuple[int, int],
) -> np.ndarray:
    """The chunk's values ``wanted[0]`` to ``wanted[1]`` (Unreadable where a page holding
    some of them is not one this path reads)."""
    codec = chunk.compression
    pages = page_headers(b, rows * k, dtype.itemsize)
    first, last = wanted
    out = allocate(last - first, dtype)
    at, dictionary = 0, None  # at: the values of the pages before this one
    for page in pages:
        body = b[page.body : page.body + page.compressed]
        if page.kind == DICTIONARY:
            if page.encoding not in (PLAIN, PLAIN_DICTIONARY):
                raise Unreadable(f"dictionary of encoding {page.encoding}")
            dictionary = _plain(inflate(body, page.uncompressed, codec), page.num_values, dtype)
            continue
        n = page.num_values
        if page.kind not in (DATA, DATA_V2) or n % k:
            raise Unreadable(f"a page of type {page.kind} or splitting a row")
        a, z = max(first, at), min(last, at + n)
        if a < z:  # the page holds some of the values wanted: its values a to z
            _data(page, body, codec, max_def, k, dictionary, out[a - first : z - first], a - at)
        at += n
    return out


def _data(
    page: Page,
    body: memoryview,
    codec: str,
    max_def: int,
    k: int,
    dictionary: np.ndarray | None,
    dest: np.ndarray,
    skip: int = 0,
) -> None:
    """One data page's values ``skip`` to ``skip + len(dest)`` written to ``dest``, once
    their levels and those before them are checked (Unreadable: the page is not one this
    path reads)."""
    n = page.num_values
    if page.kind == DATA:
        if page.rep_encoding != RLE or page.def_encoding != RLE:
            raise Unreadable("levels of another encoding than RLE")
        rep, rest = _prefixed(inflate(body, page.uncompressed, codec))
        levels, values = _prefixed(rest) if max_def else (rest[:0], rest)
    else:
        if page.num_nulls or page.num_rows * k != n:
            raise Unreadable("a v2 page with nulls or rows of another count")
        levels_len = page.rep_length + page.def_length
        if levels_len > min(len(body), page.uncompressed):
            raise Unreadable("v2 levels longer than their page")
        rep, levels = body[: page.rep_length], body[page.rep_length : levels_len]
        values = inflate(
            body[levels_len:],
            page.uncompressed - levels_len,
            codec if page.is_compressed else "UNCOMPRESSED",
        )
    end = skip + len(dest)  # the levels up to the last value wanted (every one's: n)
    if not check_rows(rep, end, k) or not check_constant(
        levels, max_def.bit_length(), end, max_def
    ):
        raise Unreadable("levels other than whole lists without nulls")
    if not _decoded(values, page.encoding, dictionary, dest, skip, n):
        raise Unreadable(f"values of encoding {page.encoding} that do not fill the page exactly")


def _prefixed(raw: memoryview) -> tuple[memoryview, memoryview]:
    """A v1 page's levels (4 bytes of length, then the runs) and the bytes after them."""
    if len(raw) < 4 or int.from_bytes(raw[:4], "little") > len(raw) - 4:
        raise Unreadable("v1 levels longer than their page")
    end = 4 + int.from_bytes(raw[:4], "little")
    return raw[4:end], raw[end:]


def _decoded(
    values: memoryview,
    encoding: int,
    dictionary: np.ndarray | None,
    dest: np.ndarray,
    skip: int = 0,
    n: int | None = None,
) -> bool:
    """The page's values ``skip`` to ``skip + len(dest)`` (of ``n``, default as many)
    written to ``dest``; dictionary indices are decoded up to the last one wanted, the
    page's values are otherwise checked to fill it exactly."""
    size, end = dest.itemsize, skip + len(dest)
    n = end if n is None else n
    if encoding == PLAIN and len(values) == n * size:
        dest[:] = np.frombuffer(values, dtype=dest.dtype, count=end)[skip:]
        return True
    if encoding == BYTE_STREAM_SPLIT and len(values) == n * size:
        streams = np.frombuffer(values, dtype=np.uint8, count=n * size).reshape(size, n)
        dest.view(np.uint8).reshape(len(dest), size)[:] = streams[:, skip:end].T
        return True
    if encoding in (RLE_DICTIONARY, PLAIN_DICTIONARY) and dictionary is not None and len(values):
        index = decode(values[1:], values[0], end)[skip:]
        if len(index) != len(dest) or (len(index) and int(index.max()) >= len(dictionary)):
            return False
        np.take(dictionary, index, out=dest)
        return True
    return False


def _plain(values: memoryview, n: int, dtype: np.dtype) -> np.ndarray:
    if len(values) != n * dtype.itemsize:
        raise Unreadable("a dictionary of another size than its values")
    return np.frombuffer(values, dtype=dtype, count=n)
