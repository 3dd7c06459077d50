"""Lists of numbers of any length read from their pages: exactly what Arrow reads, or declined.

Files are written by pyarrow with every option that changes the pages (codec,
dictionary and its fallback to plain pages, byte-stream split, data page v1 and v2,
page sizes that split a row across pages); rows of one value to thousands. Where the
page reader can read the column (no null, no empty list, a codec it knows) it must, so
a regression that declines everything fails here too. The level streams' readers are
checked against a plain decode of every run.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _pageopts import READ, SETTINGS, page_options, written
from hypothesis import given
from hypothesis import strategies as st

from shardwise.formats.parquet._rle_bitpacked import _run, _runs, decode, row_starts
from shardwise.formats.parquet._varlist import read_var_lists
from shardwise.formats.parquet.format import _read_row_group

TYPES = [pa.int32(), pa.int64(), pa.uint32(), pa.float32(), pa.float64()]


def _values(t: pa.DataType, n: int, rng: np.random.Generator, vocab: int) -> np.ndarray:
    dtype = np.dtype(t.to_pandas_dtype())
    if dtype.kind == "f":
        return rng.integers(0, vocab, n).astype(dtype) / 7
    return rng.integers(0, vocab, n).astype(dtype)


def _table(
    t: pa.DataType, lengths: list[int], nulls: str, seed: int, vocab: int, large: bool
) -> pa.Table:
    rng = np.random.default_rng(seed)
    flat = pa.array(_values(t, sum(lengths), rng, vocab))
    if nulls == "values" and len(flat):
        flat = pa.array(flat.to_numpy(), mask=rng.random(len(flat)) < 0.05)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64 if large else np.int32)
    np.cumsum(lengths, out=offsets[1:])
    mask = pa.array(rng.random(len(lengths)) < 0.2) if nulls == "rows" and lengths else None
    cls = pa.LargeListArray if large else pa.ListArray
    tokens = cls.from_arrays(pa.array(offsets), flat, mask=mask)
    n = len(lengths)
    return pa.table({"id": np.arange(n, dtype=np.int64), "tokens": tokens, "text": ["r"] * n})


@st.composite
def _cases(draw: st.DrawFn) -> tuple[pa.Table, dict[str, Any], bool]:
    t = draw(st.sampled_from(TYPES))
    rows = draw(st.integers(0, 400))
    longest = draw(st.sampled_from([1, 3, 9, 64, 700, 5000]))
    lengths = draw(st.lists(st.integers(1, longest), min_size=rows, max_size=rows))
    nulls = draw(st.sampled_from(["none", "none", "none", "rows", "values", "empty"]))
    if nulls == "empty" and lengths:
        lengths[draw(st.integers(0, len(lengths) - 1))] = 0
    opts = page_options(draw, "tokens.list.element", [37, 150, 4096])
    vocab = draw(st.sampled_from([2, 300, 70000, 1 << 30]))
    seed = draw(st.integers(0, 1 << 16))
    table = _table(t, lengths, nulls, seed, vocab, draw(st.booleans()))
    return table, opts, opts["compression"] in READ


def _clean(column: pa.Array) -> bool:
    """Whether a list column has no null list, null value or empty list."""
    lengths = pc.list_value_length(column)
    return (
        column.null_count == 0
        and column.flatten().null_count == 0
        and (len(column) == 0 or pc.min(lengths).as_py() > 0)
    )


@SETTINGS
@given(_cases(), st.data())
def test_lists_read_from_pages_equal_arrow(
    case: tuple[pa.Table, dict[str, Any], bool], data: st.DataObject
) -> None:
    """Whole row groups through the format's read, and ranges of rows alone (a unit's head
    and rest): Arrow's column or its slice, and read wherever the reader can."""
    table, opts, readable = case
    raw = written(table, opts)
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        for columns in (None, ["tokens"], ["text", "tokens"]):
            got = _read_row_group(pf, source, g, columns, False)
            want = pf.read_row_group(g, columns=columns, use_threads=False)
            assert got.schema.equals(want.schema, check_metadata=True)
            assert got.equals(want), (g, columns, opts)
        arrow = pf.read_row_group(g, columns=["tokens"]).column(0).combine_chunks()
        whole = read_var_lists(pf, source, g, ["tokens"])
        eligible = readable and _clean(arrow)
        if len(arrow):  # (an empty row group's chunk may hold no page: read or left to Arrow)
            assert ("tokens" in whole) == eligible, (opts, table.schema)
        if "tokens" in whole:
            assert whole["tokens"].equals(arrow)
        n = pf.metadata.row_group(g).num_rows
        cut = data.draw(st.integers(0, n))
        for lo, hi in ((0, cut), (cut, n)):
            part = read_var_lists(pf, source, g, ["tokens"], (lo, hi))
            if eligible and len(arrow):
                assert "tokens" in part, (lo, hi, opts)
            if "tokens" in part:
                assert part["tokens"].equals(arrow.slice(lo, hi - lo)), (lo, hi, opts)
        assert read_var_lists(pf, source, g, ["tokens"], (0, n + 1)) == {}  # past the end


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("codec", sorted(READ))
@pytest.mark.parametrize("dictionary", [True, False])
def test_token_lists_across_many_pages_are_read(version: str, codec: str, dictionary: bool) -> None:
    """Token-like rows (hundreds to thousands of ids, a 50,000-word vocabulary) in small
    pages, so rows continue from page to page: read here, equal to Arrow, and any cut
    between a head and its rest gives the two slices."""
    rng = np.random.default_rng(7)
    table = _table(pa.int32(), list(rng.integers(300, 4000, 300)), "none", 3, 50000, False)
    opts = {"compression": codec, "data_page_version": version, "data_page_size": 20000}
    raw = written(table, {**opts, "use_dictionary": dictionary, "row_group_size": 120})
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        arrow = pf.read_row_group(g, columns=["tokens"]).column(0).combine_chunks()
        n = len(arrow)
        for lo, hi in ((0, n), (0, 1), (0, n // 2), (n // 2, n), (n - 1, n), (5, 6)):
            got = read_var_lists(pf, source, g, ["tokens"], (lo, hi))
            assert "tokens" in got, (g, lo, hi)
            assert got["tokens"].equals(arrow.slice(lo, hi - lo))


@pytest.mark.parametrize("gap", ["null values", "null lists", "empty lists"])
@pytest.mark.parametrize("dictionary", [True, False])
def test_long_stretches_of_nulls_or_empty_lists_are_declined(gap: str, dictionary: bool) -> None:
    """Nulls or empty lists many in a row (their levels one repeated run, not packed):
    the column is left to Arrow, and the read equals Arrow's."""
    rows: list[Any] = [list(range(i, i + 50)) for i in range(40)]
    if gap == "null values":
        rows[10] = [None] * 30
    elif gap == "null lists":
        rows[10:30] = [None] * 20
    else:
        rows[10:30] = [[]] * 20
    table = pa.table({"tokens": pa.array(rows, pa.list_(pa.int32()))})
    raw = written(table, {"use_dictionary": dictionary})
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    assert read_var_lists(pf, source, 0, ["tokens"]) == {}
    assert _read_row_group(pf, source, 0, None, False).equals(table)


def _naive_runs(b: bytes, width: int, n: int) -> list[tuple[int, int, int]]:
    out, got, i = [], 0, 0
    while got < n:
        count, value, start, i = _run(memoryview(b), width, i, n - got)
        out.append((count, value, start))
        got += count
    return out


def _stream(draw: st.DrawFn, width: int) -> tuple[bytes, int]:
    """A hybrid stream of runs as encoders write them: packed runs (often many of one
    size in a row) and repeated ones."""
    out, n = bytearray(), 0
    for _ in range(draw(st.integers(1, 30))):
        if draw(st.booleans()):
            groups = draw(st.sampled_from([1, 2, 63]))
            for _ in range(draw(st.integers(1, 5))):
                out += bytes([groups << 1 | 1]) + draw(
                    st.binary(min_size=groups * width, max_size=groups * width)
                )
                n += groups * 8
        else:
            count = draw(st.integers(1, 300))
            head, value = count << 1, draw(st.integers(0, (1 << width) - 1))
            while head >= 0x80:
                out.append(head & 0x7F | 0x80)
                head >>= 7
            out += bytes([head]) + value.to_bytes((width + 7) // 8, "little")
            n += count
    return bytes(out), n


@SETTINGS
@given(st.data())
def test_runs_taken_at_once_equal_runs_read_one_by_one(data: st.DataObject) -> None:
    width = data.draw(st.sampled_from([1, 2, 5, 8, 16]))
    b, n = _stream(data.draw, width)
    upto = data.draw(st.integers(1, n))
    counts, values, starts, _ = _runs(memoryview(b), width, upto)
    assert list(zip(counts, values, starts)) == _naive_runs(b, width, upto)
    if width == 1:
        levels = decode(memoryview(b), 1, upto).astype(np.int64)
        assert row_starts(memoryview(b), upto).tolist() == np.flatnonzero(levels == 0).tolist()


def _token_file(dictionary: bool, version: str) -> bytes:
    rng = np.random.default_rng(11)
    table = _table(pa.int32(), list(rng.integers(1, 400, 60)), "none", 5, 3000, False)
    return written(
        table,
        {
            "use_dictionary": dictionary,
            "data_page_version": version,
            "data_page_size": 4000,
            "compression": "snappy",
        },
    )


@SETTINGS
@given(
    st.booleans(),
    st.sampled_from(["1.0", "2.0"]),
    st.lists(
        st.tuples(st.floats(0, 1, exclude_max=True), st.integers(0, 255)), min_size=1, max_size=4
    ),
)
def test_damaged_pages_give_arrows_column_or_are_declined(
    dictionary: bool, version: str, flips: list[tuple[float, int]]
) -> None:
    """Bytes of the list column's chunk overwritten: what the page reader returns, when it
    returns anything, is what Arrow reads from the same bytes."""
    raw = bytearray(_token_file(dictionary, version))
    meta = pq.ParquetFile(pa.BufferReader(bytes(raw))).metadata.row_group(0).column(1)
    start = meta.dictionary_page_offset if meta.has_dictionary_page else meta.data_page_offset
    for where, byte in flips:
        raw[start + int(where * meta.total_compressed_size)] = byte
    data = bytes(raw)
    pf = pq.ParquetFile(pa.BufferReader(data))
    ours = read_var_lists(pf, pa.BufferReader(data), 0, ["tokens"])
    if "tokens" in ours:
        arrow = pf.read_row_group(0, columns=["tokens"], use_threads=False)
        assert ours["tokens"].equals(arrow.column(0).combine_chunks())
