"""Token columns as a view of the file: the tokens of every row group of a shard written
with tokenize's options equal Arrow's read; any other layout gives None (Arrow reads it)."""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise._tokens import TokenInfo, flat_tokens, token_array
from shardwise.formats.parquet.tokenpages import token_span, token_view
from shardwise.formats.parquet.writer import _column_options

INFO = TokenInfo("<u2", 60_000, 0)
SCHEMA = pa.schema([INFO.field("tokens"), pa.field("num_tokens", pa.int32())])


def _table(lengths: list[int], seed: int = 0) -> tuple[pa.Table, np.ndarray]:
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.random.default_rng(seed).integers(0, 60_000, int(offsets[-1])).astype(np.uint16)
    counts = pa.array(np.diff(offsets).astype(np.int32))
    return pa.Table.from_arrays([token_array(flat, offsets), counts], schema=SCHEMA), flat


def _file(table: pa.Table, rows: int, **options: Any) -> tuple[pq.ParquetFile, Any]:
    buf = io.BytesIO()
    opts = _column_options(table.to_batches()[0], "zstd") | options
    with pq.ParquetWriter(buf, table.schema, **opts) as w:
        w.write_table(table, row_group_size=rows)
    source = pa.BufferReader(buf.getvalue())
    return pq.ParquetFile(source), source


def _views(pf: pq.ParquetFile, source: Any) -> list[np.ndarray | None]:
    out = []
    for g in range(pf.num_row_groups):
        counts = pf.read_row_group(g, columns=["num_tokens"]).column(0).to_numpy()
        out.append(token_view(pf, source, g, "tokens", counts, np.dtype("<u2")))
    return out


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.one_of(st.just(0), st.integers(1, 300)), min_size=1, max_size=40),
    rows=st.integers(1, 16),
    version=st.sampled_from(["1.0", "2.0"]),
)
def test_every_row_group_is_arrows_tokens(lengths: list[int], rows: int, version: str) -> None:
    table, _ = _table(lengths)
    pf, source = _file(table, rows, data_page_version=version)
    for g, view in enumerate(_views(pf, source)):
        expected, _ = flat_tokens(pf.read_row_group(g).column("tokens"), "<u2")
        assert view is not None
        assert not view.flags.owndata
        assert np.array_equal(view, expected)


@pytest.mark.parametrize(
    "options",
    [
        {"compression": "zstd"},  # compressed
        {"column_encoding": {"tokens": "PLAIN"}},  # lengths between the values
        {"data_page_size": 1024, "write_batch_size": 64},  # several pages per row group
    ],
)
def test_other_layouts_are_left_to_arrow(options: dict[str, Any]) -> None:
    table, _ = _table([50, 70, 0, 300, 20] * 200)
    pf, source = _file(table, 1000, **options)
    assert pf.num_row_groups == 1
    assert _views(pf, source) == [None]


@pytest.mark.parametrize("version", ["1.0", "2.0"])
def test_a_null_document_is_left_to_arrow(version: str) -> None:
    arr = pa.array([b"\x01\x00", None, b"\x02\x00"], pa.binary())
    table = pa.Table.from_arrays([arr, pa.array([1, 0, 1], pa.int32())], schema=SCHEMA)
    assert _views(*_file(table, 3, data_page_version=version)) == [None]


def test_counts_other_than_the_page_holds_give_none() -> None:
    table, _ = _table([10, 10])
    pf, source = _file(table, 2)
    u2 = np.dtype("<u2")
    assert token_view(pf, source, 0, "tokens", np.array([10, 10]), u2) is not None
    for counts in ([10, 9], [11, 10], [10**6, 10]):
        assert token_view(pf, source, 0, "tokens", np.array(counts), u2) is None


def test_counts_of_the_same_total_in_another_order_give_none() -> None:
    """Each document's count is checked, not only their sum: the plan cuts documents at
    the counts, so swapped counts would move every boundary between them."""
    table, _ = _table([6, 18, 4, 41])
    pf, source = _file(table, 4)
    u2 = np.dtype("<u2")
    assert token_view(pf, source, 0, "tokens", np.array([6, 18, 4, 41]), u2) is not None
    assert token_view(pf, source, 0, "tokens", np.array([18, 6, 4, 41]), u2) is None
    assert token_span(pf, source, 0, "tokens", 2, np.array([18, 6, 4, 41])) is None
    assert token_span(pf, source, 0, "tokens", 2, np.array([6, 18, 4, 41])) is not None


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(
        st.one_of(st.just(0), st.integers(1, 40), st.integers(1, 70_000)), min_size=1, max_size=700
    ),
    version=st.sampled_from(["1.0", "2.0"]),
)
def test_the_pages_lengths_are_the_documents(lengths: list[int], version: str) -> None:
    """The lengths decoded from the page (several blocks and bit widths) are the documents'."""
    table, _ = _table(lengths)
    pf, source = _file(table, len(lengths), data_page_version=version)
    u2 = np.dtype("<u2")
    assert token_view(pf, source, 0, "tokens", np.array(lengths), u2) is not None
    other = np.array(lengths)
    other[-1] += 1
    if len(lengths) > 1:
        other[0] -= 1  # the same total, two documents off
    assert token_view(pf, source, 0, "tokens", other, u2) is None


def test_lengths_of_another_count_give_none() -> None:
    from shardwise.formats.parquet._pages import read_page
    from shardwise.formats.parquet._thrift import varint

    table, _ = _table([10, 0, 30])
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, table.schema, **_column_options(table.to_batches()[0], "zstd")) as w:
        w.write_table(table)
    raw = bytearray(buf.getvalue())
    start = pq.ParquetFile(pa.BufferReader(bytes(raw))).metadata.row_group(0).column(0)
    start = start.data_page_offset
    page = read_page(memoryview(raw)[start:], 0)
    at = (
        start
        + page.body
        + 4
        + int.from_bytes(raw[start + page.body : start + page.body + 4], "little")
    )
    _, at = varint(memoryview(raw), at)  # the block size
    _, at = varint(memoryview(raw), at)  # miniblocks per block
    assert raw[at] == 3  # the lengths' value count: one per document
    raw[at] = 4
    source = pa.BufferReader(bytes(raw))
    counts = np.array([10, 0, 30])
    assert token_view(pq.ParquetFile(source), source, 0, "tokens", counts, np.dtype("<u2")) is None


def _lengths_block(block: int) -> tuple[pq.ParquetFile, Any, np.ndarray]:
    """A file of 50 documents of 7 tokens each (every length's delta 0: miniblocks of
    width 0, which take no bytes), its lengths' block size rewritten to ``block``."""
    from _parquetcraft import Reader, encode_struct, get, uvarint

    lengths = [7] * 50
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    flat = np.arange(int(offsets[-1]), dtype=np.uint16)
    table = pa.Table.from_arrays([token_array(flat, offsets)], schema=pa.schema([SCHEMA.field(0)]))
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, table.schema, **_column_options(table.to_batches()[0], "zstd")) as w:
        w.write_table(table)
    raw = buf.getvalue()
    start = pq.ParquetFile(pa.BufferReader(raw)).metadata.row_group(0).column(0).data_page_offset
    r = Reader(raw, start)
    header = r.struct()
    end = r.i + get(header, 3)[2]
    at = r.i + 4 + int.from_bytes(raw[r.i : r.i + 4], "little")  # after the levels
    assert raw[at : at + 2] == uvarint(128)  # the block size pyarrow writes
    body = raw[r.i : at] + uvarint(block) + raw[at + 2 : end]
    get(header, 2)[2] = get(header, 3)[2] = len(body)
    page = encode_struct(header) + body
    n = int.from_bytes(raw[-8:-4], "little")
    footer = Reader(raw[-8 - n : -8]).struct()
    meta = get(get(get(footer, 4)[2][1][0], 1)[2][1][0], 3)[2]  # the chunk's metadata
    for size in (6, 7):
        get(meta, size)[2] += len(page) - (end - start)
    tail = encode_struct(footer)
    data = raw[:start] + page + raw[end : -8 - n] + tail + len(tail).to_bytes(4, "little") + b"PAR1"
    source = pa.BufferReader(data)
    return pq.ParquetFile(source), source, flat


@pytest.mark.parametrize("block", [128, 1 << 31, (1 << 32) - 128, 1 << 40])
def test_a_block_of_billions_of_lengths_costs_what_the_page_holds(block: int) -> None:
    """A lengths header claiming a block of up to 2**32 values (Arrow reads it: a
    miniblock of width 0 takes no bytes) gives the tokens as Arrow reads them without
    unpacking a whole miniblock's values (a block of 2**31 was 16 GiB, a MemoryError);
    one past Arrow's 32 bits is left to Arrow, which refuses it."""
    import tracemalloc

    pf, source, flat = _lengths_block(block)
    try:
        arrow = flat_tokens(pf.read_row_group(0).column("tokens"), "<u2")[0]
    except (pa.ArrowException, OSError):
        arrow = None
    tracemalloc.start()
    try:
        view = token_view(pf, source, 0, "tokens", np.full(50, 7), np.dtype("<u2"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    if arrow is None:
        assert view is None and block >> 32
    else:
        assert view is not None and np.array_equal(view, arrow) and np.array_equal(view, flat)
