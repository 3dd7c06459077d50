"""Wide binary values (images, audio, documents) read from their pages, for a range of rows.

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
average, else Arrow reads the column) as far as the wanted rows' indices need (a head of
a unit needs its first few; a read to the row group's end walks and checks the whole
page), the data pages' indices are decoded for the wanted rows only
(:func:`~shardwise.formats.parquet._rle_bitpacked.decode`), and the wanted values are
copied once into the new array's buffer: the same 7 heads took 13.8-15.4 ms. A stored
page is not decompressed at all, so a head copies its own values and nothing more (a
unit of images had first been copied whole into new memory for each of its two parts).
Whole reads of a row group take this path too
(:func:`shardwise.formats.parquet.format._read_row_group`).

Data pages of plain values are read the same way: Spark's writer and pyarrow's fall back
to them once a row group's dictionary grows past its limit (after about ten images of
100 KB in Spark's case), and ``use_dictionary=False`` writes nothing else. Their values
are found by walking their length prefixes in the page, itself read where it is stored
as it is.

Only a ``binary`` or ``large_binary`` column without repetition is read so (top-level, or a
struct's child, :mod:`shardwise.formats.parquet._leaves`): an optional dictionary page
(``PLAIN`` or ``PLAIN_DICTIONARY``), then v1 data pages of dictionary indices or plain
values, without nulls up to the last row wanted. Anything else -- strings (Arrow checks
their UTF-8), v2 pages, nulls, small values, other codecs, a size or count that does not
add up -- declines the column (an :class:`~shardwise.formats.parquet._pages.Unreadable`,
logged at debug level) and Arrow reads it as before. As in
:mod:`shardwise.formats.parquet._fixedlist`, every page header is checked before anything
is decompressed, and only the pages holding wanted rows are.
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
    column_rows,
)
from shardwise.formats.parquet._leaves import flat_struct, read_leaves
from shardwise.formats.parquet._pages import DATA, DICTIONARY, Page, Unreadable, inflate
from shardwise.formats.parquet._rle_bitpacked import check_constant, decode
from shardwise.formats.parquet._stored import Runs, one_run, stored_runs

__all__ = ["MAX_VALUES", "MIN_MEAN", "read_binary_dicts", "reads"]

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


def reads(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` is one this reader may read (binary values, or a
    flat struct with a binary child)."""
    return _eligible(t) or flat_struct(t, _eligible)


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
    ):
        raise Unreadable("not flat binary values")
    b = chunk_bytes(chunk, source)
    pages = _headers(b, rows)
    codec, max_def = chunk.compression, desc.max_definition_level
    words = None
    if pages and pages[0].kind == DICTIONARY:  # (a chunk of no rows may hold no page)
        words, pages = _Dictionary(_runs(b, pages[0], codec), pages[0].num_values), pages[1:]
    segments = [
        _page_values(b, page, codec, max_def, (a, z), words)
        for page, a, z in _overlap(pages, lo, hi)
    ]
    if words is not None and hi == rows:  # a read to the row group's end checks it all
        words.upto(words.count)
    return _gathered(field.type, segments)


class _Dictionary:
    """A dictionary page's values, walked only as far as the indices read so far need
    (a head of a few rows needs the first few of a unit's values): walked to its end,
    the values must fill the page exactly."""

    def __init__(self, raw: Runs, count: int) -> None:
        self.raw, self.count, self.end = raw, count, 0
        self.starts, self.lengths = np.empty(0, np.int64), np.empty(0, np.int64)

    def upto(self, n: int) -> tuple[np.ndarray, np.ndarray]:
        """The starts and lengths of (at least) the first ``n`` values."""
        if n > self.count:
            raise Unreadable("a dictionary index past the dictionary")
        have = len(self.starts)
        if n > have:
            full = n == self.count
            starts, lengths, self.end = _offsets(self.raw, self.end, n - have, exact=full)
            self.starts = np.concatenate([self.starts, starts])
            self.lengths = np.concatenate([self.lengths, lengths])
        return self.starts, self.lengths


def _overlap(pages: list[Page], lo: int, hi: int) -> list[tuple[Page, int, int]]:
    """The data pages holding rows ``lo`` to ``hi``, each with the page's rows ``[a, z)``
    wanted (counted from the page's first row)."""
    out, at = [], 0  # at: the rows of the pages before this one
    for page in pages:
        n = page.num_values
        a, z = max(lo, at), min(hi, at + n)
        if a < z:
            out.append((page, a - at, z - at))
        at += n
    return out


Segment = tuple[Runs, np.ndarray, np.ndarray]  # a page's bytes, the values' starts, lengths


def _page_values(
    b: memoryview,
    page: Page,
    codec: str,
    max_def: int,
    rows: tuple[int, int],
    words: _Dictionary | None,
) -> Segment:
    """Where the values of a data page's rows ``rows`` are: in the dictionary ``words``
    (a page of its indices), or in the page itself (plain values)."""
    a, z = rows
    if page.encoding in (RLE_DICTIONARY, PLAIN_DICTIONARY):
        if words is None:
            raise Unreadable("dictionary indices without a dictionary page")
        raw = inflate(b[page.body : page.body + page.compressed], page.uncompressed, codec)
        body = _levels_checked(one_run(raw), page, max_def, z)
        indices = raw[body:]
        if not len(indices):
            raise Unreadable("a data page without its indices' bit width")
        index = decode(indices[1:], indices[0], z)[a:]
        starts, lengths = words.upto(int(index.max()) + 1 if len(index) else 0)
        return words.raw, starts[index], lengths[index]
    runs = _runs(b, page, codec)
    body = _levels_checked(runs, page, max_def, z)
    whole = not max_def or z == page.num_values  # every level checked: no null in the page
    starts, lengths, _ = _offsets(runs, body, page.num_values if whole else z, exact=whole)
    return runs, starts[a:z], lengths[a:z]


def _levels_checked(raw: Runs, page: Page, max_def: int, z: int) -> int:
    """Where a v1 data page's values start, after its definition levels, checked to say
    no null up to row ``z`` of the page."""
    if not max_def:
        return 0
    if page.def_encoding != RLE or raw.size < 4:
        raise Unreadable("definition levels of another encoding than RLE")
    size = raw.cursor().u32(0)
    if size > raw.size - 4:
        raise Unreadable("v1 levels longer than their page")
    levels = np.empty(size, dtype=np.uint8)
    raw.gather(levels, np.array([4]), np.array([size]), np.array([0]))
    if not check_constant(levels.data, max_def.bit_length(), z, max_def):
        raise Unreadable("nulls")
    return 4 + size


def _headers(b: memoryview, count: int) -> list[Page]:
    """Every page header of the chunk, checked before anything is decompressed: a
    dictionary page of few wide values first or none, then v1 data pages of dictionary
    indices or of plain wide values, holding ``count`` values in all, filling the chunk
    exactly."""

    def values(page: Page, first: bool, got: int) -> int:
        n = page.num_values
        if page.kind == DICTIONARY:
            if not first or page.encoding not in (PLAIN, PLAIN_DICTIONARY):
                raise Unreadable("a dictionary page not first, or not plain")
            _wide(page)
            return 0
        if page.kind != DATA or n == 0 or got + n > count:
            raise Unreadable(f"a page of type {page.kind}, empty, or one too many")
        if page.encoding == PLAIN:
            _wide(page)
        elif page.encoding not in (RLE_DICTIONARY, PLAIN_DICTIONARY):
            raise Unreadable(f"a data page of encoding {page.encoding}")
        elif page.uncompressed > n * 12 + 1024:
            raise Unreadable("a page of indices larger than its values")
        return n

    return walk_pages(b, count, values)


def _wide(page: Page) -> None:
    """Unreadable unless the page holds few values of :data:`MIN_MEAN` bytes or more on
    average (each value is walked by a Python step)."""
    n = page.num_values
    if n > MAX_VALUES or page.uncompressed < n * (4 + MIN_MEAN):
        raise Unreadable(f"a page of {n} values of {page.uncompressed} bytes")


def _runs(b: memoryview, page: Page, codec: str) -> Runs:
    """A page's bytes: where they are stored as they are in the chunk
    (:mod:`shardwise.formats.parquet._stored`), else decompressed."""
    body = b[page.body : page.body + page.compressed]
    stored = stored_runs(body, page.uncompressed, codec)
    return stored if stored is not None else one_run(inflate(body, page.uncompressed, codec))


def _offsets(raw: Runs, pos: int, n: int, exact: bool) -> tuple[np.ndarray, np.ndarray, int]:
    """Where each of ``n`` plain values from ``pos`` of ``raw`` on starts, its length, and
    where they end (Unreadable: a value past the page, or with ``exact`` the values not
    filling the page to its end)."""
    starts = np.empty(n, dtype=np.int64)
    lengths = np.empty(n, dtype=np.int64)
    size = raw.size
    cursor = raw.cursor()
    for i in range(n):
        if pos + 4 > size:
            raise Unreadable("a value past its page")
        length = cursor.u32(pos)
        pos += 4
        if length > size - pos:
            raise Unreadable("a value past its page")
        starts[i], lengths[i] = pos, length
        pos += length
    if exact and pos != size:
        raise Unreadable("a page of other values than its header says")
    if exact:  # the page read whole: every run of it, even one no value wanted lies in
        raw.check_all()
    return starts, lengths, pos


def _gathered(t: pa.DataType, segments: list[Segment]) -> pa.Array:
    """The values of ``segments`` (each a page's bytes, the values' starts and lengths in
    it), in order, copied once into the buffer of a new array of type ``t``."""
    lengths = np.concatenate([seg[2] for seg in segments]) if segments else np.zeros(0, np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    large = pa.types.is_large_binary(t)
    if not large and total > INT32_MAX:
        raise Unreadable("values past binary's 2 GiB: Arrow gives them in chunks")
    data = allocate(total, np.dtype(np.uint8))
    first = 0
    for raw, starts, seg_lengths in segments:
        raw.gather(data, starts, seg_lengths, offsets[first : first + len(starts)])
        first += len(starts)
    offs = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(t, len(lengths), [None, pa.py_buffer(offs), pa.py_buffer(data)])
