"""Lists of numbers of any length (token ids, ragged features) read from their Parquet pages.

A ``list<int32>`` column is one Parquet column: a repetition level per value (0 opens
a row), a definition level per value, then the values. Arrow turns the levels into
offsets and validity, value by value; on the loader benchmark's token lists (rows of
512-4,096 ids, dictionary-encoded) that took 18-28 ms a row group of 2.9 million ids, and
this reader 10-13 ms (one thread, medians of 25 alternated reads). Without nulls or
empty lists, the levels say only where each row starts, and long lists make them a few
runs a row: here each page's repetition levels are read as runs
(:func:`~shardwise.formats.parquet._rle_bitpacked.row_starts`), its definition levels
are checked to be at their maximum, and its values are taken as the fixed-size list
reader takes them (plain, byte-stream-split or dictionary indices).

Anything else -- a null list, a null value, an empty list, another nesting, encoding or
codec, a level or header that does not parse, counts that do not add up -- declines the
column (:class:`~shardwise.formats.parquet._pages.Unreadable`, logged at debug level) and
Arrow reads it, reporting any damage itself. Memory is bounded as for fixed-size lists:
every page header is checked before anything is decompressed.

A range of rows can be read alone (``rows=(lo, hi)``): the pages are walked in order
(a row may continue on the next page), each one's levels read, and only the pages
holding values of the rows wanted have their values decoded.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.formats.parquet._chunk import allocate, chunk_bytes, page_headers
from shardwise.formats.parquet._fixedlist import _decoded, _plain, _prefixed, list_column, numbers
from shardwise.formats.parquet._leaves import read_leaves
from shardwise.formats.parquet._pages import DATA, DATA_V2, DICTIONARY, Page, Unreadable, inflate
from shardwise.formats.parquet._rle_bitpacked import check_constant, decode, row_starts

__all__ = ["eligible", "read_var_lists"]

RLE, PLAIN, PLAIN_DICTIONARY, RLE_DICTIONARY = 3, 0, 2, 8
DICTIONARY_ENCODINGS = (PLAIN_DICTIONARY, RLE_DICTIONARY)
INT32_MAX = (1 << 31) - 1


def read_var_lists(
    pf: Any, source: Any, group: int, names: list[str], rows: tuple[int, int] | None = None
) -> dict[str, pa.Array]:
    """The columns of ``names`` in row group ``group`` of ``pf`` (a ``ParquetFile`` over
    ``source``) that are lists of numbers without nulls or empty lists, decoded here; the
    others (and any this path declines) are left out, for Arrow to read. ``rows``
    ``(lo, hi)``: only the row group's rows ``lo`` to ``hi``."""
    return read_leaves(pf, source, group, names, rows, eligible, _column)


def eligible(t: pa.DataType) -> bool:
    """Whether columns of type ``t`` are of the types read here (lists of numbers)."""
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and numbers(t.value_type)


def _column(
    pf: Any, source: Any, group: int, leaf: int, field: pa.Field, wanted: tuple[int, int] | None
) -> pa.Array:
    rows, lo, hi, (chunk, desc), dtype = list_column(pf, group, leaf, field, wanted)
    b = chunk_bytes(chunk, source)
    pages = page_headers(b, chunk.num_values, dtype.itemsize)
    walk = _Walk(rows, lo, hi, desc.max_definition_level, dtype)
    walk.run(b, pages, chunk.compression)
    starts = np.concatenate(walk.starts) if walk.starts else np.zeros(0, np.int64)
    if starts.size != hi - lo + 1:
        raise Unreadable("levels opening another count of rows than the row group's")
    values = walk.values()
    offsets = starts - starts[0]
    if int(offsets[-1]) != len(values):
        raise Unreadable("values of another count than the levels'")
    return _array(field.type, offsets, values)


class _Walk:
    """The chunk's pages read in order until rows ``lo`` to ``hi`` are read: ``starts``,
    the levels at which each of those rows starts and the level after the last one;
    ``parts``, their values (one array a page holding some)."""

    def __init__(self, rows: int, lo: int, hi: int, max_def: int, dtype: np.dtype) -> None:
        self.rows, self.lo, self.hi, self.max_def, self.dtype = rows, lo, hi, max_def, dtype
        self.starts: list[np.ndarray] = []
        self.parts: list[np.ndarray] = []
        self.indices: list[bool] = []  # whether each part holds dictionary indices
        self.dictionary: np.ndarray | None = None
        self.seen = 0  # the rows started in the pages read so far

    def run(self, b: memoryview, pages: list[Page], codec: str) -> None:
        at = 0  # the levels of the pages before this one
        for page in pages:
            body = b[page.body : page.body + page.compressed]
            if page.kind == DICTIONARY:
                if page.encoding not in (PLAIN, PLAIN_DICTIONARY):
                    raise Unreadable(f"dictionary of encoding {page.encoding}")
                raw = inflate(body, page.uncompressed, codec)
                self.dictionary = _plain(raw, page.num_values, self.dtype)
                continue
            if page.kind not in (DATA, DATA_V2):
                raise Unreadable(f"a page of type {page.kind}")
            self._page(page, body, codec, at)
            at += page.num_values
            if self.seen > self.hi:  # the row after the last one wanted has started
                return
        if self.seen != self.rows:
            raise Unreadable(f"levels opening {self.seen} rows in a row group of {self.rows}")
        self.starts.append(np.array([at], dtype=np.int64))  # the last row ends the chunk

    def _page(self, page: Page, body: memoryview, codec: str, at: int) -> None:
        n, lo, hi = page.num_values, self.lo, self.hi
        rep, levels, values = _sections(page, body, codec)
        if not check_constant(levels, self.max_def.bit_length(), n, self.max_def):
            raise Unreadable("null or empty lists, or null values")
        local = row_starts(rep, n)
        if at == 0 and (not len(local) or local[0] != 0):
            raise Unreadable("a first page that does not open a row")
        first = self.seen
        self.seen += len(local)
        self.starts.append(local[max(lo - first, 0) : max(hi + 1 - first, 0)] + at)
        if lo >= self.seen or hi < first:  # no value of this page is wanted
            return
        a = int(local[lo - first]) if lo >= first else 0
        z = int(local[hi - first]) if hi < self.seen else n
        if a < z:
            self._values(page, values(), a, z)

    def _values(self, page: Page, values: memoryview, a: int, z: int) -> None:
        """The page's values ``a`` to ``z``: dictionary indices kept as they are (the
        dictionary is applied once, to all of them, by :meth:`values`), others decoded."""
        if page.encoding in DICTIONARY_ENCODINGS and self.dictionary is not None and len(values):
            index = decode(values[1:], values[0], z)[a:]
            if len(index) != z - a or (len(index) and int(index.max()) >= len(self.dictionary)):
                raise Unreadable("dictionary indices past their page or their dictionary")
            self.parts.append(index)
            self.indices.append(True)
            return
        dest = allocate(z - a, self.dtype)
        if not _decoded(values, page.encoding, self.dictionary, dest, a, page.num_values):
            raise Unreadable(f"values of encoding {page.encoding} that do not fill the page")
        self.parts.append(dest)
        self.indices.append(False)

    def values(self) -> np.ndarray:
        """The values of the rows read, in one array: each part's dictionary indices
        gathered, or its values copied, into its place. Memory comes from Arrow's pool
        (numpy's gather would convert the indices into fresh memory of its own, which on
        a fresh process costs a page fault per 4 KiB)."""
        out = allocate(sum(len(p) for p in self.parts), self.dtype)
        widest = max((len(p) for p, i in zip(self.parts, self.indices) if i), default=0)
        scratch = allocate(widest, np.dtype(np.intp))
        at = 0
        for part, index in zip(self.parts, self.indices):
            dest = out[at : at + len(part)]
            if index and self.dictionary is not None:  # (index parts exist only with one)
                scratch[: len(part)] = part
                np.take(self.dictionary, scratch[: len(part)], out=dest, mode="clip")
            else:
                dest[:] = part
            at += len(part)
        return out


def _sections(
    page: Page, body: memoryview, codec: str
) -> tuple[memoryview, memoryview, Callable[[], memoryview]]:
    """A data page's repetition levels, definition levels, and a function giving its
    values (a v2 page's are decompressed only when wanted)."""
    if page.kind == DATA:
        if page.rep_encoding != RLE or page.def_encoding != RLE:
            raise Unreadable("levels of another encoding than RLE")
        rep, rest = _prefixed(inflate(body, page.uncompressed, codec))
        levels, values = _prefixed(rest)
        return rep, levels, lambda: values
    if page.num_nulls:
        raise Unreadable("a v2 page with nulls")
    end = page.rep_length + page.def_length
    if end > min(len(body), page.uncompressed):
        raise Unreadable("v2 levels longer than their page")
    rep, levels = body[: page.rep_length], body[page.rep_length : end]
    codec = codec if page.is_compressed else "UNCOMPRESSED"
    return rep, levels, lambda: inflate(body[end:], page.uncompressed - end, codec)


def _array(t: pa.DataType, offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A list array of type ``t`` from its offsets (int64, from 0) and values."""
    large = pa.types.is_large_list(t)
    if not large and int(offsets[-1]) > INT32_MAX:
        raise Unreadable("values past a list's 2**31: Arrow gives them in chunks")
    flat = pa.Array.from_buffers(t.value_type, len(values), [None, pa.py_buffer(values)])
    offs = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(t, len(offsets) - 1, [None, pa.py_buffer(offs)], children=[flat])
