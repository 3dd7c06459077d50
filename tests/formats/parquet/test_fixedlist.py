"""Fixed-size lists of numbers read from their pages: exactly what Arrow reads, or declined.

Files are written by pyarrow with every option that changes the pages (codec,
dictionary, byte-stream split, data page v1 and v2, page sizes splitting a row group
into many pages), with and without nulls. The page reader must give the table Arrow
gives; where it can read the column (no nulls, a codec and encoding it knows) it must
do so, so a regression that makes it decline everything fails here too. Damaged files
must give what Arrow gives, or the same error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _pageopts import READ, SETTINGS, page_options, written
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import FormatError
from shardwise.formats import get_format
from shardwise.formats.parquet._fixedlist import read_fixed_lists
from shardwise.formats.parquet._pages import Unreadable
from shardwise.formats.parquet._rle_bitpacked import _unpack, check_rows, decode
from shardwise.formats.parquet.format import _read_row_group

TYPES = [pa.float32(), pa.float64(), pa.int32(), pa.int64(), pa.uint32(), pa.uint64()]


def _values(t: pa.DataType, n: int, rng: np.random.Generator, distinct: bool) -> np.ndarray:
    dtype = np.dtype(t.to_pandas_dtype())
    if dtype.kind == "f":
        v = rng.standard_normal(n) if distinct else rng.integers(0, 7, n)
        return v.astype(dtype)
    info = np.iinfo(dtype)
    return (
        rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
        if distinct
        else rng.integers(0, 7, n).astype(dtype)
    )


def _table(t: pa.DataType, k: int, rows: int, nulls: str, seed: int, distinct: bool) -> pa.Table:
    rng = np.random.default_rng(seed)
    flat = pa.array(_values(t, rows * k, rng, distinct))
    if nulls == "elements" and rows:
        mask = rng.random(rows * k) < 0.1
        flat = pa.array(flat.to_numpy(), mask=mask)
    mask = pa.array(rng.random(rows) < 0.2) if nulls == "rows" and rows else None
    emb = pa.FixedSizeListArray.from_arrays(flat, k, mask=mask)
    return pa.table(
        {"id": np.arange(rows, dtype=np.int64), "emb": emb, "text": [f"r{i}" for i in range(rows)]}
    )


@st.composite
def _cases(draw: st.DrawFn) -> tuple[pa.Table, dict[str, Any], bool]:
    t = draw(st.sampled_from(TYPES))
    k = draw(st.sampled_from([1, 2, 3, 7, 8, 9, 16, 63, 64, 100, 128]))
    rows = draw(st.integers(0, 1500))
    nulls = draw(st.sampled_from(["none", "none", "none", "rows", "elements"]))
    distinct = draw(st.booleans())
    opts = page_options(draw, "emb.list.element", [97, 500, 4096])
    table = _table(t, k, rows, nulls, draw(st.integers(0, 1 << 16)), distinct)
    emb = table.column("emb")
    readable = opts["compression"] in READ
    return (
        table,
        opts,
        readable and emb.null_count == 0 and emb.combine_chunks().values.null_count == 0,
    )


@SETTINGS
@given(_cases())
def test_fixed_lists_read_from_pages_equal_arrow(
    case: tuple[pa.Table, dict[str, Any], bool],
) -> None:
    table, opts, eligible = case
    pf = pq.ParquetFile(pa.BufferReader(written(table, opts)))
    source = pa.BufferReader(written(table, opts))
    for g in range(pf.num_row_groups):
        for columns in (None, ["emb"], ["text", "emb"]):
            got = _read_row_group(pf, source, g, columns, False)
            want = pf.read_row_group(g, columns=columns, use_threads=False)
            assert got.schema.equals(want.schema, check_metadata=True)
            assert got.equals(want), (g, columns, opts)
        taken = read_fixed_lists(pf, source, g, ["emb"])
        # (an empty row group's chunk may hold no page at all: Arrow reads it)
        rows = pf.metadata.row_group(g).num_rows
        assert ("emb" in taken) == eligible or (not rows and not taken), (opts, table.schema)


@SETTINGS
@given(_cases(), st.data())
def test_a_range_of_rows_is_the_slice_of_arrows_read(
    case: tuple[pa.Table, dict[str, Any], bool], data: st.DataObject
) -> None:
    """Rows ``lo`` to ``hi`` of a row group alone (a unit's head, then its rest), whatever
    the pages: what is read is that slice of Arrow's column, and both ranges are read
    whenever the whole column is (a range checks the pages it decodes: one without the
    nulls of another may be read where the whole is left to Arrow)."""
    table, opts, _ = case
    raw = written(table, opts)
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        cut = data.draw(st.integers(0, n))
        arrow = pf.read_row_group(g, columns=["emb"]).column("emb").combine_chunks()
        whole = read_fixed_lists(pf, source, g, ["emb"])
        head = read_fixed_lists(pf, source, g, ["emb"], (0, cut))
        rest = read_fixed_lists(pf, source, g, ["emb"], (cut, n))
        if "emb" in whole:
            assert "emb" in head and "emb" in rest, (cut, n, opts)
        if "emb" in head:
            assert head["emb"].equals(arrow.slice(0, cut))
        if "emb" in rest:
            assert rest["emb"].equals(arrow.slice(cut))
        assert read_fixed_lists(pf, source, g, ["emb"], (0, n + 1)) == {}  # past the end


ENCODINGS = {
    "plain": {"use_dictionary": False},
    "dictionary": {"use_dictionary": True},
    "dictionary_then_plain": {"use_dictionary": True, "dictionary_pagesize_limit": 4096},
    "byte_stream_split": {"use_dictionary": False, "use_byte_stream_split": ["emb.list.element"]},
}


@pytest.mark.parametrize("version", ["1.0", "2.0"])
@pytest.mark.parametrize("encoding", list(ENCODINGS))
@pytest.mark.parametrize("codec", sorted(READ))
def test_every_page_kind_is_read(version: str, encoding: str, codec: str) -> None:
    """Each page version, value encoding and codec read here, for lists whose rows do
    and do not fill whole bytes of levels: read (not declined) and equal to Arrow."""
    for k, t in ((3, pa.float64()), (64, pa.float32()), (100, pa.int64())):
        table = _table(t, k, 2500, "none", k, True)
        data = written(
            table,
            {
                "compression": codec,
                "data_page_version": version,
                "data_page_size": 8192,
                "row_group_size": 1000,
                **ENCODINGS[encoding],
            },
        )
        pf = pq.ParquetFile(pa.BufferReader(data))
        kinds = {pf.metadata.row_group(g).column(1).encodings for g in range(pf.num_row_groups)}
        for g in range(pf.num_row_groups):
            taken = read_fixed_lists(pf, pa.BufferReader(data), g, ["emb"])
            assert "emb" in taken, (k, kinds)
            assert taken["emb"].equals(
                pf.read_row_group(g, columns=["emb"]).column(0).combine_chunks()
            )


def test_whole_read_unit_uses_the_page_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the format (as the loader and the pipeline read): same rows, and the page
    reader is what decoded the list column."""
    table = _table(pa.float32(), 64, 3000, "none", 1, True)
    path = tmp_path / "emb.parquet"
    pq.write_table(table, path, row_group_size=1000)
    fmt = get_format("parquet")
    units = fmt.list_units(str(path), path.stat().st_size)
    calls: list[str] = []
    import shardwise.formats.parquet.format as parquet

    def spy(pf: Any, source: Any, group: int, names: list[str]) -> dict[str, pa.Array]:
        out = read_fixed_lists(pf, source, group, names)
        calls.extend(out)
        return out

    monkeypatch.setattr(parquet, "read_fixed_lists", spy)
    got = pa.concat_tables([fmt.read_table(u, use_threads=False) for u in units])
    assert got.equals(table)
    assert calls == ["emb"] * 3


@settings(max_examples=80, deadline=None, derandomize=True, database=None)
@given(st.integers(0, 1 << 20), st.integers(1, 40))
def test_damaged_pages_give_what_arrow_gives(seed: int, flips: int) -> None:
    """Bytes of the column chunks changed at random: the same table as Arrow, or an
    error from both (this path declines anything it cannot check, then Arrow reads)."""
    table = _table(pa.float32(), 16, 600, "none", seed, seed % 2 == 0)
    data = bytearray(
        written(table, {"row_group_size": 300, "data_page_size": 2048, "compression": "snappy"})
    )
    rng = np.random.default_rng(seed)
    meta = pq.ParquetFile(pa.BufferReader(bytes(data))).metadata
    chunk = meta.row_group(0).column(1)
    lo = chunk.dictionary_page_offset or chunk.data_page_offset
    for at in rng.integers(lo, lo + chunk.total_compressed_size, flips):
        data[at] = int(rng.integers(0, 256))
    pf = pq.ParquetFile(pa.BufferReader(bytes(data)))
    try:
        want: pa.Table | Exception = pf.read_row_group(0, use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        want = exc
    try:
        got: pa.Table | Exception = _read_row_group(
            pf, pa.BufferReader(bytes(data)), 0, None, False
        )
    except (pa.ArrowException, OSError) as exc:
        got = exc
    if isinstance(want, Exception):
        assert isinstance(got, Exception) and type(got) is type(want)
    else:
        assert isinstance(got, pa.Table) and got.equals(want)


def test_damaged_row_group_is_a_format_error(tmp_path: Path) -> None:
    table = _table(pa.float64(), 8, 400, "none", 3, True)
    path = tmp_path / "bad.parquet"
    pq.write_table(table, path, row_group_size=400, compression="snappy")
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)
    data = bytearray(path.read_bytes())
    start = chunk.dictionary_page_offset or chunk.data_page_offset
    data[start : start + 64] = b"\xff" * 64  # the first page header
    path.write_bytes(bytes(data))
    fmt = get_format("parquet")
    unit = fmt.list_units(str(path), path.stat().st_size)[0]
    with pytest.raises(FormatError, match="row group 0") as err:
        fmt.read_table(unit)
    assert str(path) in str(err.value)


def _pack(values: np.ndarray, width: int) -> np.ndarray:
    bits = (
        (values[:, None].astype(np.uint64) >> np.arange(width, dtype=np.uint64)) & np.uint64(1)
    ).astype(np.uint8)
    return np.packbits(bits.ravel(), bitorder="little")


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(
    st.integers(1, 32),
    st.lists(st.tuples(st.booleans(), st.integers(1, 40)), min_size=1, max_size=12),
    st.integers(0, 1 << 30),
)
def test_hybrid_streams_decode(width: int, runs: list[tuple[bool, int]], seed: int) -> None:
    """Streams of repeated and packed runs, built here, decode to their values."""
    rng = np.random.default_rng(seed)
    out, want = bytearray(), []
    for literal, size in runs:
        if literal:
            v = rng.integers(0, 1 << width, 8 * size, dtype=np.uint64)
            out += _varint(size << 1 | 1) + _pack(v, width).tobytes()
        else:
            v = np.full(size, rng.integers(0, 1 << width, dtype=np.uint64))
            out += _varint(size << 1) + int(v[0]).to_bytes((width + 7) // 8, "little")
        want.extend(v.tolist())
    n = int(rng.integers(1, len(want) + 1))
    assert decode(memoryview(bytes(out)), width, n).tolist() == want[:n]
    assert (
        _unpack(
            _pack(np.asarray(want[: len(want) // 8 * 8], dtype=np.uint64), width),
            width,
            len(want) // 8 * 8,
        ).tolist()
        == want[: len(want) // 8 * 8]
    )


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def test_repetition_levels_that_are_not_whole_rows_are_refused() -> None:
    k, rows = 8, 50
    good = bytes(_varint(1 << 1 | 1)) + bytes(
        _pack(np.array([0] + [1] * 7), 1)
    )  # one row: a packed group
    assert check_rows(memoryview(good * rows), k * rows, k)
    short_row = bytes(_varint(1 << 1 | 1)) + bytes(_pack(np.array([0, 1, 1, 1, 0, 1, 1, 1]), 1))
    assert not check_rows(memoryview(good * 20 + short_row + good * 29), k * rows, k)
    assert not check_rows(memoryview(good * 49), k * rows, k)  # a row missing: the stream ends


def _pq(table: pa.Table, **opts: Any) -> tuple[pq.ParquetFile, pa.BufferReader]:
    data = written(table, opts)
    return pq.ParquetFile(pa.BufferReader(data)), pa.BufferReader(data)


@pytest.mark.parametrize(
    "columns",
    [
        ["emb", "emb"],
        ["id", "id", "emb"],
        ["emb", "missing"],
        ["emb.list.element"],
        ["text", "emb", "id"],
    ],
)
def test_projections_arrow_reads_its_own_way_are_left_to_it(columns: list[str]) -> None:
    """Names twice, names the file lacks (a column of the dataset's schema another file
    has) and nested paths: the table Arrow gives for them, never a KeyError."""
    pf, source = _pq(_table(pa.float32(), 4, 50, "none", 0, True))
    got = _read_row_group(pf, source, 0, columns, False)
    want = pf.read_row_group(0, columns=columns, use_threads=False)
    assert got.equals(want) and got.schema.equals(want.schema, check_metadata=True)


class _Pair(pa.ExtensionType):
    """An extension type stored as a struct of two columns."""

    def __init__(self) -> None:
        super().__init__(
            pa.struct([("x", pa.int32()), ("y", pa.list_(pa.float32(), 4))]), "shardwise.test.pair"
        )

    def __arrow_ext_serialize__(self) -> bytes:
        return b""

    @classmethod
    def __arrow_ext_deserialize__(cls, storage_type: pa.DataType, serialized: bytes) -> _Pair:
        return cls()


def test_columns_after_an_extension_type_are_found_by_their_own_pages() -> None:
    """An extension type stored in two Parquet columns before a fixed-size list (whose
    name is the first part of the extension's column paths): the list's own pages."""
    pa.register_extension_type(_Pair())
    try:
        n = 40
        storage = pa.StructArray.from_arrays(
            [
                pa.array(np.arange(n, dtype=np.int32)),
                pa.FixedSizeListArray.from_arrays(pa.array(-np.arange(4 * n, dtype=np.float32)), 4),
            ],
            ["x", "y"],
        )
        emb = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(4 * n, dtype=np.float32)), 4)
        table = pa.table({"emb.v": pa.ExtensionArray.from_storage(_Pair(), storage), "emb": emb})
        pf, source = _pq(table)
        got = _read_row_group(pf, source, 0, None, False)
        assert got.equals(pf.read_row_group(0)) and got.column("emb").equals(table.column("emb"))
    finally:
        pa.unregister_extension_type("shardwise.test.pair")


def test_chunk_starts_where_arrow_starts_it() -> None:
    from types import SimpleNamespace

    from shardwise.formats.parquet._chunk import chunk_start as _start

    def chunk(dictionary: int | None, data: int) -> Any:
        return SimpleNamespace(
            has_dictionary_page=dictionary is not None,
            dictionary_page_offset=dictionary,
            data_page_offset=data,
        )

    assert _start(chunk(4, 100)) == 4
    assert _start(chunk(None, 100)) == 100
    assert _start(chunk(0, 100)) == 100  # old writers left it 0
    assert (
        _start(chunk(500, 100)) == 100
    )  # a dictionary "after" the data: Arrow reads from the data


def test_hostile_page_headers_are_refused_quickly() -> None:
    from shardwise.formats.parquet._pages import read_page

    sizes = bytes([0x15, 0x00, 0x15, 0x10, 0x15, 0x10])  # kind 0, sizes 8 and 8
    huge_list = (
        bytes([0x09 | 0x60]) + bytes([0xF3]) + bytes([0x80] * 5 + [0x10])
    )  # field 6+: list<byte> of 2**39
    with pytest.raises(ValueError, match="container"):
        read_page(memoryview(sizes + huge_list + b"\x00"), 0)
    deep = bytes([0x09 | 0x60]) + bytes([0x19]) * 3000 + bytes([0x03]) + b"\x00"
    with pytest.raises(ValueError):
        read_page(memoryview(sizes + deep + b"\x00"), 0)
    with pytest.raises(ValueError, match="data header"):  # a data page without its data page header
        read_page(memoryview(sizes + b"\x00"), 0)


def test_a_few_bytes_claiming_billions_of_levels_cost_nothing() -> None:
    many = _varint(((1 << 31) - 1) << 1) + b"\x01"  # a repeated run of 2**31 - 1 ones
    assert decode(memoryview(many), 1, 10).tolist() == [1] * 10
    assert not check_rows(memoryview(many), 64 * 1000, 64)  # no row opens with a 0
    huge = _varint((1 << 40) << 1) + b"\x01"  # 2**40: a header Arrow stops at
    with pytest.raises(Unreadable):
        decode(memoryview(huge), 1, 10)
    with pytest.raises(Unreadable):
        check_rows(memoryview(huge), 64 * 1000, 64)


def test_indices_of_no_bits_claiming_billions_cost_nothing() -> None:
    """Bit width 0 (a dictionary of one value): a packed run stores no bytes, so a few
    bytes may claim 2**31 values; after a repeated run (values put together with numpy)
    they must not be expanded (that was a MemoryError, raised as is)."""
    most = _varint(((1 << 31) - 1) // 8 << 1 | 1)  # the longest packed run Arrow reads
    for stream in (_varint(2) + most, most, _varint(2) + most + _varint(2)):
        assert decode(memoryview(stream), 0, 20).tolist() == [0] * 20


def test_pages_of_another_length_than_their_header_says_are_refused() -> None:
    import zlib

    from shardwise.formats.parquet._pages import inflate

    raw = bytes(range(256)) * 40
    snappy = memoryview(pa.Codec("snappy").compress(raw)).cast("B")
    assert bytes(inflate(snappy, len(raw), "SNAPPY")) == raw
    gz = zlib.compressobj(wbits=31)
    gzip = memoryview(gz.compress(raw) + gz.flush())
    assert bytes(inflate(gzip, len(raw), "GZIP")) == raw
    for body, codec in ((snappy, "SNAPPY"), (gzip, "GZIP"), (memoryview(raw), "UNCOMPRESSED")):
        with pytest.raises(ValueError):
            inflate(body, len(raw) + 16, codec)
    with pytest.raises(ValueError):
        inflate(memoryview(pa.Codec("brotli").compress(raw)).cast("B"), len(raw), "BROTLI")


def test_byte_stream_split_with_bytes_to_spare_is_left_to_arrow() -> None:
    from shardwise.formats.parquet._fixedlist import BYTE_STREAM_SPLIT, _decoded

    dest = np.empty(8, dtype=np.float32)
    body = memoryview(np.arange(8, dtype=np.float32).view(np.uint8).reshape(8, 4).T.tobytes())
    assert _decoded(body, BYTE_STREAM_SPLIT, None, dest) and dest.tolist() == list(range(8))
    assert not _decoded(memoryview(bytes(body) + b"\x00" * 4), BYTE_STREAM_SPLIT, None, dest)
