"""Wide binary values (images, audio, documents) read from a dictionary page, for a range of rows.

pyarrow's writer puts a row group's binary values in a dictionary page by default, all of
them when they are written in one batch: on the loader benchmark's image shape each unit
(22-250 images of 50-150 KB) is one 25 MB dictionary page and one small data page of
indices. Arrow decodes such a column by copying every value it reads out of the
decompressed page into a growing array: the 7 heads (half of each unit) took 23-24 CPU ms
in all, and the 7 whole units 30-33 ms (alternated fresh processes, warm page cache).

Here the dictionary page is read where it is stored as it is in the compressed stream
(incompressible values such as JPEGs are: snappy literals, zstd raw blocks, see
:mod:`shardwise.formats.parquet._stored`), else decompressed; its values' offsets are
found by walking their 4-byte length prefixes (one Python step a value, so only for few
wide values: at most :data:`MAX_VALUES` values of :data:`MIN_MEAN` bytes or more on
average, else Arrow reads the column), the data pages' indices are decoded for the wanted rows only
(:func:`~shardwise.formats.parquet._rle_bitpacked.decode`), and the wanted values are
copied once into the new array's buffer: the same 7 heads took 13.8-15.4 ms. A stored
page is not decompressed at all, so a head copies its own values and nothing more (a
unit of images had first been copied whole into new memory for each of its two parts).
Whole reads of a row group take this path too
(:func:`shardwise.formats.parquet.format._read_row_group`).

Only a top-level ``binary`` or ``large_binary`` column is read so: of a dictionary page
(``PLAIN`` or ``PLAIN_DICTIONARY``) and v1 data pages of dictionary indices, without nulls
up to the last row wanted. Anything else -- strings (Arrow checks their UTF-8), v2 pages,
a data page of plain values (a writer's fallback when the dictionary grew too large),
nulls, other codecs, a size or count that does not add up -- declines the column (an
:class:`~shardwise.formats.parquet._pages.Unreadable`, logged at debug level) and Arrow
reads it as before. As in :mod:`shardwise.formats.parquet._fixedlist`, every page header is
checked before anything is decompressed, and only the pages holding wanted rows are.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.formats.parquet._chunk import allocate, chunk_bytes, walk_pages
from shardwise.formats.parquet._fixedlist import (
    PLAIN,
    PLAIN_DICTIONARY,
    RLE,
    RLE_DICTIONARY,
    _prefixed,
    column_rows,
)
from shardwise.formats.parquet._leaves import read_leaves
from shardwise.formats.parquet._pages import DATA, DICTIONARY, Page, Unreadable, inflate
from shardwise.formats.parquet._rle_bitpacked import check_constant, decode
from shardwise.formats.parquet._stored import Runs, one_run, stored_runs

__all__ = ["MAX_VALUES", "MIN_MEAN", "read_binary_dicts"]

log = logging.getLogger(__name__)
MAX_VALUES = 1 << 16  # dictionary values walked one by one, at most
MIN_MEAN = 1024  # bytes a dictionary value holds on average, at least (else Arrow is faster)
INT32_MAX = (1 << 31) - 1


def read_binary_dicts(
    pf: Any, source: Any, group: int, names: list[str], rows: tuple[int, int] | None = None
) -> dict[str, pa.Array]:
    """The columns of ``names`` in row group ``group`` of ``pf`` (a ``ParquetFile`` over
    ``source``) that are wide binary values of a dictionary page, decoded here (see the
    module docstring); the others, and any this path declines, are left out for Arrow.
    ``rows`` ``(lo, hi)``: only the row group's rows ``lo`` to ``hi``."""
    return read_leaves(pf, source, group, names, rows, _eligible, _column, structs=True)


def _eligible(t: pa.DataType) -> bool:
    return pa.types.is_binary(t) or pa.types.is_large_binary(t)


def _column(
    pf: Any, source: Any, group: int, leaf: int, field: pa.Field, wanted: tuple[int, int] | None
) -> pa.Array:
    rows, lo, hi, chunk, desc = column_rows(pf, group, leaf, wanted)
    if (
        desc.path != field.name
        or desc.physical_type != "BYTE_ARRAY"
        or desc.max_repetition_level != 0
        or chunk.num_values != rows
        or not chunk.has_dictionary_page
    ):
        raise Unreadable("not flat binary values of a dictionary page")
    b = chunk_bytes(chunk, source)
    pages = _headers(b, rows)
    dictionary = pages[0]
    raw = _dictionary(b, dictionary, chunk.compression)
    starts, lengths = _offsets(raw, dictionary.num_values)
    index = _indices(b, pages[1:], chunk.compression, desc.max_definition_level, lo, hi)
    if len(index) and int(index.max()) >= len(starts):
        raise Unreadable("a dictionary index past the dictionary")
    return _gathered(field.type, raw, starts[index], lengths[index])


def _headers(b: memoryview, count: int) -> list[Page]:
    """Every page header of the chunk, checked before anything is decompressed: one
    dictionary page of few wide values first, then v1 data pages of dictionary indices
    holding ``count`` values in all, filling the chunk exactly."""

    def values(page: Page, first: bool, got: int) -> int:
        n = page.num_values
        if first:
            if page.kind != DICTIONARY or page.encoding not in (PLAIN, PLAIN_DICTIONARY):
                raise Unreadable("no plain dictionary page first")
            if n > MAX_VALUES or page.uncompressed < n * (4 + MIN_MEAN):
                raise Unreadable(f"a dictionary of {n} values of {page.uncompressed} bytes")
            return 0
        if page.kind != DATA or page.encoding not in (RLE_DICTIONARY, PLAIN_DICTIONARY):
            raise Unreadable(f"a page of type {page.kind} and encoding {page.encoding}")
        if page.uncompressed > n * 12 + 1024 or n == 0 or got + n > count:
            raise Unreadable("a data page larger than its values, empty, or one too many")
        return n

    return walk_pages(b, count, values)


def _dictionary(b: memoryview, page: Page, codec: str) -> Runs:
    """The dictionary page's bytes: where they are stored as they are in the chunk
    (:mod:`shardwise.formats.parquet._stored`), else decompressed."""
    body = b[page.body : page.body + page.compressed]
    stored = stored_runs(body, page.uncompressed, codec)
    return stored if stored is not None else one_run(inflate(body, page.uncompressed, codec))


def _offsets(raw: Runs, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Where each of the dictionary's ``n`` plain values starts in ``raw``, and its length
    (Unreadable: the values do not fill the page exactly)."""
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    pos, size = 0, raw.size
    cursor = raw.cursor()
    for i in range(n):
        if pos + 4 > size:
            raise Unreadable("a dictionary value past its page")
        length = cursor.u32(pos)
        pos += 4
        if length > size - pos:
            raise Unreadable("a dictionary value past its page")
        starts[i], lengths[i] = pos, length
        pos += length
    if pos != size:
        raise Unreadable("a dictionary page of other values than its header says")
    return starts, lengths


def _indices(
    b: memoryview, pages: list[Page], codec: str, max_def: int, lo: int, hi: int
) -> np.ndarray:
    """The dictionary indices of rows ``lo`` to ``hi``, from the data pages holding them
    (their definition levels checked up to the last row wanted: no nulls)."""
    parts, at = [], 0  # at: the rows of the pages before this one
    for page in pages:
        n = page.num_values
        a, z = max(lo, at), min(hi, at + n)
        if a < z:
            raw = inflate(b[page.body : page.body + page.compressed], page.uncompressed, codec)
            if max_def:
                if page.def_encoding != RLE:
                    raise Unreadable("definition levels of another encoding than RLE")
                levels, raw = _prefixed(raw)
                if not check_constant(levels, max_def.bit_length(), z - at, max_def):
                    raise Unreadable("nulls")
            if not len(raw):
                raise Unreadable("a data page without its indices' bit width")
            parts.append(decode(raw[1:], raw[0], z - at)[a - at :])
        at += n
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint32)


def _gathered(t: pa.DataType, raw: Runs, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    """The values at ``starts`` (of ``lengths`` bytes) of ``raw``, copied once into the
    buffer of a new array of type ``t``."""
    offsets = np.zeros(len(starts) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    large = pa.types.is_large_binary(t)
    if not large and total > INT32_MAX:
        raise Unreadable("values past binary's 2 GiB: Arrow gives them in chunks")
    data = allocate(total, np.dtype(np.uint8))
    raw.gather(data, starts, lengths, offsets)
    offs = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(t, len(starts), [None, pa.py_buffer(offs), pa.py_buffer(data)])
