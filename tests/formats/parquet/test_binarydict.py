"""Wide binary values read from a dictionary page: exactly what Arrow reads, or declined.

Files are written by pyarrow with the options that change the pages (codec, dictionary
or not, a dictionary that falls back to plain pages, data page v1 and v2, small pages
splitting a row group), with and without nulls, values of ``binary`` and
``large_binary``. Whatever range of rows is asked, what the page reader returns must be
that slice of Arrow's column; where it should read the column (the layouts it knows)
it must, so a regression that makes it decline everything fails here too.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _pageopts import SETTINGS as PAGE_SETTINGS
from _parquetcraft import Reader, encode_struct, get
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.formats.parquet import _binarydict
from shardwise.formats.parquet._binarydict import MIN_MEAN, read_binary_dicts
from shardwise.formats.parquet._thrift import varint

SETTINGS = settings(PAGE_SETTINGS, max_examples=100)
CODECS = ["none", "snappy", "gzip", "zstd", "brotli", "lz4"]
READ = {"none", "snappy", "gzip", "zstd"}  # the codecs the page reader decompresses


def _table(
    rows: int, seed: int, t: pa.DataType, nulls: bool, distinct: int, width: int
) -> pa.Table:
    """``rows`` values of about ``width`` bytes, ``distinct`` of them different (0: all)."""
    rng = np.random.default_rng(seed)
    kinds = distinct or max(rows, 1)
    pool = [rng.bytes(int(n)) for n in rng.integers(0, 2 * width + 1, kinds)]
    picks = rng.integers(0, kinds, rows) if distinct else np.arange(rows)
    values: list[bytes | None] = [pool[i] for i in picks]
    if nulls and rows:
        values = [None if m else v for v, m in zip(values, rng.random(rows) < 0.1)]
    return pa.table(
        {
            "id": np.arange(rows, dtype=np.int64),
            "image": pa.array(values, type=t),
            "name": [f"r{i}" for i in range(rows)],
        }
    )


def _write(table: pa.Table, opts: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, **opts)
    return buf.getvalue()


def _arrow(pf: pq.ParquetFile, g: int) -> pa.Array:
    return pf.read_row_group(g, columns=["image"], use_threads=False).column(0).combine_chunks()


@st.composite
def _cases(draw: st.DrawFn) -> tuple[pa.Table, dict[str, Any]]:
    rows = draw(st.integers(0, 300))
    table = _table(
        rows,
        draw(st.integers(0, 1 << 16)),
        draw(st.sampled_from([pa.binary(), pa.large_binary()])),
        draw(st.sampled_from([False, False, True])),
        draw(st.sampled_from([0, 0, 1, 3, 40])),
        draw(st.sampled_from([8, 1500, 3000, 3000])),
    )
    opts: dict[str, Any] = {
        "compression": draw(st.sampled_from([*CODECS, *sorted(READ)])),
        "use_dictionary": draw(st.sampled_from([True, True, True, False])),
        "data_page_version": draw(st.sampled_from(["1.0", "1.0", "2.0"])),
        "data_page_size": draw(st.sampled_from([1 << 10, 1 << 20])),
        "row_group_size": draw(st.sampled_from([37, 150, 4096])),
        "dictionary_pagesize_limit": draw(st.sampled_from([1 << 14, 1 << 20])),
        "write_batch_size": draw(st.sampled_from([16, 1024])),
    }
    return table, opts


@SETTINGS
@given(_cases(), st.data())
def test_a_range_of_rows_is_the_slice_of_arrows_read(
    case: tuple[pa.Table, dict[str, Any]], data: st.DataObject
) -> None:
    """The whole row group, a head and the rest: each is that slice of Arrow's column
    (same type, values, nulls, order) whenever it is read; both ranges are read whenever
    the whole is."""
    table, opts = case
    raw = _write(table, opts)
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        n = pf.metadata.row_group(g).num_rows
        cut = data.draw(st.integers(0, n))
        arrow = _arrow(pf, g)
        whole = read_binary_dicts(pf, source, g, ["image"])
        head = read_binary_dicts(pf, source, g, ["image", "id"], (0, cut))
        rest = read_binary_dicts(pf, source, g, ["image"], (cut, n))
        assert "id" not in head and "name" not in read_binary_dicts(pf, source, g, ["name"])
        if "image" in whole:
            assert "image" in head and "image" in rest, (cut, n, opts)
            assert whole["image"].type == arrow.type
            assert whole["image"].equals(arrow)
        if "image" in head:
            assert head["image"].type == arrow.type
            assert head["image"].equals(arrow.slice(0, cut))
        if "image" in rest:
            assert rest["image"].equals(arrow.slice(cut))
        assert read_binary_dicts(pf, source, g, ["image"], (0, n + 1)) == {}  # past the end


@pytest.mark.parametrize("t", [pa.binary(), pa.large_binary()])
@pytest.mark.parametrize("codec", sorted(READ))
@pytest.mark.parametrize(
    "layout",
    ["one page", "small pages", "repeated values", "required", "plain", "plain after a while"],
)
def test_every_layout_it_knows_is_read(t: pa.DataType, codec: str, layout: str) -> None:
    """Wide values in a dictionary page and v1 data pages of indices, as pyarrow writes
    them by default, or in pages of plain values (no dictionary, or after a dictionary
    grew too large): read (not declined) and equal to Arrow, for every range."""
    table = _table(400, 7, t, False, 50 if layout == "repeated values" else 0, 2000)
    if layout == "required":
        table = table.cast(pa.schema([f.with_nullable(f.name != "image") for f in table.schema]))
    opts: dict[str, Any] = {"compression": codec, "row_group_size": 150}
    if layout == "small pages":
        opts |= {"data_page_size": 64, "write_batch_size": 8}
    if layout == "plain":  # no dictionary: pages of plain values (Spark's writer, pyarrow's option)
        opts |= {"use_dictionary": False, "data_page_size": 10_000}
    if layout == "plain after a while":  # the writer's fallback when the dictionary grows
        opts |= {"dictionary_pagesize_limit": 4096, "write_batch_size": 4, "data_page_size": 9000}
    raw = _write(table, opts)
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        arrow, n = _arrow(pf, g), pf.metadata.row_group(g).num_rows
        for lo, hi in ((0, n), (0, n // 3), (n // 3, n), (5, 6), (n, n)):
            got = read_binary_dicts(pf, source, g, ["image"], (lo, hi))
            assert "image" in got, (g, lo, hi)
            assert got["image"].type == t
            assert got["image"].equals(arrow.slice(lo, hi - lo))


def _declined(table: pa.Table, **opts: Any) -> None:
    raw = _write(table, {"row_group_size": 150, **opts})
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        assert read_binary_dicts(pf, source, g, ["image"]) == {}


def test_what_it_does_not_know_is_left_to_arrow() -> None:
    """Strings (Arrow checks their UTF-8), v2 pages, nulls, small values, codecs it does
    not decompress: declined, for Arrow to read."""
    wide = _table(300, 3, pa.binary(), False, 0, 2000)
    _declined(wide, data_page_version="2.0")
    _declined(wide, compression="brotli")
    _declined(_table(300, 3, pa.binary(), True, 0, 2000))
    _declined(_table(300, 3, pa.binary(), False, 0, MIN_MEAN // 4))
    text = pa.table({"image": pa.array(["x" * 3000 + str(i) for i in range(300)])})
    _declined(text)


def test_damaged_dictionary_is_declined() -> None:
    """A dictionary page whose length prefixes do not add up: declined (Arrow reports it)."""
    table = pa.table({"image": pa.array([bytes([i]) * 2000 for i in range(20)])})
    raw = bytearray(_write(table, {"compression": "none"}))
    pf = pq.ParquetFile(pa.BufferReader(bytes(raw)))
    chunk = pf.metadata.row_group(0).column(0)
    at = raw.index(bytes([0]) * 2000, chunk.dictionary_page_offset) - 4  # first value's length
    for length in (2001, 1 << 30, 1999):
        raw[at : at + 4] = length.to_bytes(4, "little")
        data = bytes(raw)
        got = read_binary_dicts(
            pq.ParquetFile(pa.BufferReader(data)), pa.BufferReader(data), 0, ["image"]
        )
        assert got == {}, length


def test_a_head_walks_the_dictionary_only_as_far_as_its_rows_need() -> None:
    """A head of 3 rows needs the dictionary's first 3 values: damage to the last value's
    length prefix does not stop it (its values are Arrow's), while any read that reaches
    the row group's end (a rest, a whole unit) walks, and checks, the whole page:
    declined, for Arrow to report."""
    table = pa.table({"image": pa.array([bytes([i]) * 2000 for i in range(20)])})
    raw = bytearray(_write(table, {"compression": "none"}))
    clean = pq.ParquetFile(pa.BufferReader(bytes(raw)))
    arrow = _arrow(clean, 0)
    chunk = clean.metadata.row_group(0).column(0)
    at = raw.index(bytes([19]) * 2000, chunk.dictionary_page_offset) - 4  # the last length
    raw[at : at + 4] = (1999).to_bytes(4, "little")
    data = bytes(raw)

    def read(rows: tuple[int, int]) -> dict[str, pa.Array]:
        pf = pq.ParquetFile(pa.BufferReader(data))
        return read_binary_dicts(pf, pa.BufferReader(data), 0, ["image"], rows)

    assert read((0, 3))["image"].equals(arrow.slice(0, 3))
    assert read((2, 19))["image"].equals(arrow.slice(2, 17))
    assert read((19, 20)) == {}
    assert read((0, 20)) == {}


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_incompressible_values_are_copied_from_the_stored_page(
    codec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random values (as JPEGs are to a codec) are stored as they are in the compressed
    dictionary page: read from it without decompressing it, equal to Arrow; a damaged
    length prefix in such a page is still declined."""

    real = _binarydict.inflate

    def small_only(body: Any, size: int, codec: str) -> Any:  # pages of indices are tiny
        assert size < 100_000, "the stored dictionary page was decompressed"
        return real(body, size, codec)

    monkeypatch.setattr(_binarydict, "inflate", small_only)
    table = _table(300, 11, pa.binary(), False, 0, 40_000)
    raw = _write(table, {"compression": codec, "row_group_size": 150, "data_page_size": 1 << 20})
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    assert pf.metadata.row_group(0).column(1).compression == codec.upper()
    for g in range(pf.num_row_groups):
        arrow, n = _arrow(pf, g), pf.metadata.row_group(g).num_rows
        for lo, hi in ((0, n), (0, 7), (7, n), (n - 1, n)):
            got = read_binary_dicts(pf, source, g, ["image"], (lo, hi))
            assert got["image"].equals(arrow.slice(lo, hi - lo)), (g, lo, hi)
    value = table.column("image")[0].as_py()
    damaged = bytearray(raw)
    at = damaged.index(value) - 4  # the first value's length prefix, inside a literal
    damaged[at : at + 4] = (len(value) + 1).to_bytes(4, "little")
    data = bytes(damaged)
    got = read_binary_dicts(
        pq.ParquetFile(pa.BufferReader(data)), pa.BufferReader(data), 0, ["image"]
    )
    assert got == {}


def _images_struct(rows: int, seed: int, null_paths: bool, wide_paths: bool) -> pa.Table:
    """Images as Hugging Face's ``Image`` feature stores them: ``{bytes, path}`` structs."""
    rng = np.random.default_rng(seed)
    values = [rng.bytes(int(n)) for n in rng.integers(2000, 6000, rows)]
    paths: list[str | None] = [("p" * 3000 if wide_paths else "") + f"{i}.jpg" for i in range(rows)]
    if null_paths:
        paths = [None if i % 3 else p for i, p in enumerate(paths)]
    image = pa.StructArray.from_arrays(
        [pa.array(values, pa.binary()), pa.array(paths, pa.string())], names=["bytes", "path"]
    )
    return pa.table({"id": np.arange(rows), "image": image})


@pytest.mark.parametrize("codec", ["snappy", "zstd", "none"])
@pytest.mark.parametrize("null_paths", [False, True])
@pytest.mark.parametrize("wide_paths", [False, True])
def test_image_structs_are_read_with_their_bytes_from_the_pages(
    codec: str, null_paths: bool, wide_paths: bool
) -> None:
    """``{bytes, path}`` structs: the bytes from the dictionary page, the paths (strings,
    some null) by Arrow, the struct equal to Arrow's for every range of rows."""
    table = _images_struct(300, 13, null_paths, wide_paths)
    raw = _write(table, {"compression": codec, "row_group_size": 130})
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    for g in range(pf.num_row_groups):
        arrow, n = _arrow(pf, g), pf.metadata.row_group(g).num_rows
        for lo, hi in ((0, n), (0, n // 4), (n // 4, n), (n, n)):
            got = read_binary_dicts(pf, source, g, ["image", "id"], (lo, hi))
            assert list(got) == ["image"], (g, lo, hi)
            assert got["image"].type == arrow.type
            assert got["image"].equals(arrow.slice(lo, hi - lo))
            assert got["image"].null_count == 0


def test_image_structs_with_nulls_are_left_to_arrow() -> None:
    """A null struct or a null image: the bytes' definition levels are not all at their
    maximum, so Arrow reads the struct (it knows which level means what); rows before the
    first null are read as any."""
    table = _images_struct(200, 17, False, False)
    image = table.column("image").combine_chunks()
    mask = pa.array([i % 7 == 3 for i in range(200)])
    null_structs = pa.StructArray.from_arrays(
        [image.field(0), image.field(1)], names=["bytes", "path"], mask=mask
    )
    values = [None if i % 5 == 2 else v for i, v in enumerate(image.field(0).to_pylist())]
    null_bytes = pa.StructArray.from_arrays(
        [pa.array(values, pa.binary()), image.field(1)], names=["bytes", "path"]
    )
    for column in (null_structs, null_bytes):
        raw = _write(table.set_column(1, "image", column), {"row_group_size": 100})
        pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
        assert read_binary_dicts(pf, source, 0, ["image"]) == {}
        head = read_binary_dicts(pf, source, 0, ["image"], (0, 2))  # no null up to row 2
        assert head["image"].equals(_arrow(pf, 0).slice(0, 2))


def test_a_plain_page_is_read_up_to_its_first_null() -> None:
    """A page of plain values holds no bytes for a null: rows before the first null are
    read from it (only their values are walked), a range reaching the null is declined."""
    values: list[bytes | None] = [np.random.default_rng(i).bytes(3000) for i in range(100)]
    values[80] = None
    raw = _write(pa.table({"image": pa.array(values, pa.binary())}), {"use_dictionary": False})
    pf, source = pq.ParquetFile(pa.BufferReader(raw)), pa.BufferReader(raw)
    head = read_binary_dicts(pf, source, 0, ["image"], (0, 80))
    assert head["image"].equals(_arrow(pf, 0).slice(0, 80))
    assert read_binary_dicts(pf, source, 0, ["image"], (0, 81)) == {}
    assert read_binary_dicts(pf, source, 0, ["image"]) == {}


def _with_indices(indices: bytes, values: list[bytes] | None = None, codec: str = "none") -> bytes:
    """A file of ``values`` (10 of one wide value: a dictionary of one) in one row group,
    compressed by ``codec``, whose data page's indices (after its definition levels) are
    ``indices``."""
    table = pa.table({"image": pa.array(values or [b"x" * 3000] * 10, pa.binary())})
    raw = _write(table, {"compression": codec})
    start = pq.ParquetFile(pa.BufferReader(raw)).metadata.row_group(0).column(0).data_page_offset
    r = Reader(raw, start)
    header = r.struct()
    end = r.i + get(header, 3)[2]
    body = raw[r.i : end]
    if codec != "none":
        body = pa.Codec(codec).decompress(body, get(header, 2)[2], asbytes=True)
    body = body[: 4 + int.from_bytes(body[:4], "little")] + indices
    get(header, 2)[2] = len(body)
    if codec != "none":
        body = pa.Codec(codec).compress(body, asbytes=True)
    get(header, 3)[2] = len(body)
    page = encode_struct(header) + body
    n = int.from_bytes(raw[-8:-4], "little")
    footer = Reader(raw[-8 - n : -8]).struct()
    meta = get(get(get(footer, 4)[2][1][0], 1)[2][1][0], 3)[2]  # the chunk's metadata
    for size in (6, 7):  # its uncompressed and compressed sizes (near enough for Arrow)
        get(meta, size)[2] += len(page) - (end - start)
    tail = encode_struct(footer)
    return raw[:start] + page + raw[end : -8 - n] + tail + len(tail).to_bytes(4, "little") + b"PAR1"


def _uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


GROUPS = ((1 << 31) - 1) // 8  # the most groups of 8 a packed run may claim (Arrow's limit)


@pytest.mark.parametrize(
    "indices",
    [
        bytes([0]) + _uvarint(2) + _uvarint(GROUPS << 1 | 1),  # width 0: 1, then 2**31 - 8
        bytes([0]) + _uvarint(GROUPS << 1 | 1),
        bytes([0]) + _uvarint(2) + _uvarint((GROUPS + 1) << 1 | 1),  # one group too many
        bytes([1]) + _uvarint((1 << 31) << 1) + b"\x00",  # a repeated run of 2**31
        bytes([1]) + b"\x94\x80\x80\x80\x80\x00" + b"\x00",  # 10 in a varint of 6 bytes
        bytes([1]) + b"\x94\x80\x80\x80\x00" + b"\x00",  # 10 in a varint of 5 bytes
        bytes([1]) + _uvarint(20) + b"\x01",  # index 1 of a dictionary of one
        bytes([33]) + _uvarint(20) + b"\x00" * 5,
    ],
    ids=lambda b: b.hex(),
)
def test_indices_of_any_run_headers_read_as_arrow_reads_them(indices: bytes) -> None:
    """Dictionary indices whose runs claim billions of values in a few bytes (a bit
    width of 0 stores none), or whose headers Arrow stops at (past 32 bits, a varint
    over 5 bytes): read as Arrow reads them, or declined where Arrow refuses them, in
    bounded memory (a width of 0 was a MemoryError, raised as is)."""
    data = _with_indices(indices)
    pf = pq.ParquetFile(pa.BufferReader(data))
    try:
        arrow: pa.Array | None = _arrow(pf, 0)
    except (pa.ArrowException, OSError):
        arrow = None
    got = read_binary_dicts(pf, pa.BufferReader(data), 0, ["image"]).get("image")
    assert got is None or (arrow is not None and got.equals(arrow))
    if arrow is not None:
        assert got is not None


def test_a_whole_read_checks_the_stored_runs_no_wanted_value_lies_in() -> None:
    """A snappy dictionary page of random values stored as literals, its last value (of
    several literals) used by no row: a literal header damaged inside that value makes
    the page one Arrow refuses. A read to the row group's end claims the whole page, so
    it checks every literal's header, even those of values no row wants: declined (it
    read the rows as if the page were sound). A head reads the values it needs, from
    literals whose headers are checked."""
    rng = np.random.default_rng(5)
    values = [rng.bytes(3000) for _ in range(3)] + [rng.bytes(400_000)]
    data = bytearray(_with_indices(bytes([2]) + _uvarint(4 << 1) + b"\x00", values, "snappy"))
    pf = pq.ParquetFile(pa.BufferReader(bytes(data)))
    chunk = pf.metadata.row_group(0).column(0)
    r = Reader(bytes(data), chunk.dictionary_page_offset)
    r.struct()
    _, first = varint(memoryview(bytes(data)), r.i)  # the first literal's tag
    assert data[first + 4 * (65536 + 3) : first + 4 * (65536 + 3) + 3] == b"\xf4\xff\xff"
    assert read_binary_dicts(pf, pa.BufferReader(bytes(data)), 0, ["image"]) != {}
    data[first + 4 * (65536 + 3)] ^= 0x10  # the 5th literal's tag: inside the last value
    damaged = bytes(data)
    pf = pq.ParquetFile(pa.BufferReader(damaged))
    with pytest.raises(OSError):
        _arrow(pf, 0)
    for rows in (None, (0, 4), (2, 4)):
        assert read_binary_dicts(pf, pa.BufferReader(damaged), 0, ["image"], rows) == {}, rows
    head = read_binary_dicts(pf, pa.BufferReader(damaged), 0, ["image"], (0, 2))
    assert head["image"].to_pylist() == [values[0]] * 2


def test_a_row_group_of_no_rows_whose_chunk_holds_no_page() -> None:
    """A row group of 0 rows whose chunk is 0 bytes (no dictionary, no data page): Arrow
    reads it as 0 rows, and so does the page reader (it raised IndexError, which the
    format took for damage)."""
    table = pa.table({"image": pa.array([b"x" * 3000] * 3, pa.binary())})
    buf = io.BytesIO()
    with pq.ParquetWriter(buf, table.schema, compression="none") as writer:
        writer.write_table(table.slice(0, 0))
        writer.write_table(table)
    raw = buf.getvalue()
    n = int.from_bytes(raw[-8:-4], "little")
    footer = Reader(raw[-8 - n : -8]).struct()
    meta = get(get(get(footer, 4)[2][1][0], 1)[2][1][0], 3)[2]  # row group 0's chunk
    get(meta, 6)[2] = get(meta, 7)[2] = 0
    tail = encode_struct(footer)
    data = raw[: -8 - n] + tail + len(tail).to_bytes(4, "little") + b"PAR1"
    pf = pq.ParquetFile(pa.BufferReader(data))
    assert pf.metadata.row_group(0).num_rows == 0 and len(_arrow(pf, 0)) == 0
    for rows in (None, (0, 0)):
        got = read_binary_dicts(pf, pa.BufferReader(data), 0, ["image"], rows)
        assert got["image"].equals(_arrow(pf, 0)), rows
