"""Hostile Parquet pages, one regression test per case a differential fuzz against Arrow
found (issue 33): the page reader gives Arrow's table or declines, never another table;
it declines within bounded memory; every failure is a FormatError naming the file, the
row group and the column, and ``on_error="skip"`` quarantines it."""

from __future__ import annotations

import copy
import logging
import tracemalloc
import zlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _parquetcraft import (
    BINARY,
    BYTE,
    FALSE,
    I16,
    I32,
    I64,
    LIST,
    STRUCT,
    TRUE,
    craft,
    data_pages,
    encode_struct,
    get,
    gzip_member,
)

from shardwise.errors import FormatError
from shardwise.formats import get_format
from shardwise.formats.contract import Quarantine
from shardwise.formats.parquet._fixedlist import read_fixed_lists
from shardwise.formats.parquet._pages import MAX_ITEMS, Unreadable, inflate, read_page
from shardwise.formats.parquet.format import _read_row_group
from shardwise.storage import is_transient, transient_in_chain


def _arrow(data: bytes) -> pa.Table | Exception:
    try:
        return pq.ParquetFile(pa.BufferReader(data)).read_row_group(0, use_threads=False)
    except (pa.ArrowException, OSError) as exc:
        return exc


def _ours(data: bytes) -> dict[str, pa.Array]:
    pf = pq.ParquetFile(pa.BufferReader(data))
    return read_fixed_lists(pf, pa.BufferReader(data), 0, ["emb"])


def _refused_by_both(data: bytes) -> None:
    """Arrow raises on ``data``; the page reader declines, so shardwise raises Arrow's error."""
    assert isinstance(_arrow(data), Exception)
    assert _ours(data) == {}
    pf = pq.ParquetFile(pa.BufferReader(data))
    with pytest.raises((pa.ArrowException, OSError)):
        _read_row_group(pf, pa.BufferReader(data), 0, None, False)


def _format_error(tmp_path: Path, data: bytes) -> FormatError:
    """The FormatError reading ``data`` through the format, which must name the file, the
    row group and the column; under ``on_error="skip"`` the unit is quarantined."""
    path = tmp_path / "hostile.parquet"
    path.write_bytes(data)
    fmt = get_format("parquet")
    unit = fmt.list_units(str(path), len(data))[0]
    with pytest.raises(FormatError) as err:
        fmt.read_table(unit)
    assert str(path) in str(err.value) and "row group 0" in str(err.value)
    assert "column 'emb'" in str(err.value), err.value
    quarantine = Quarantine()
    assert fmt.read_table(unit, on_error="skip", quarantine=quarantine) is None
    assert quarantine.count == unit.num_samples
    return err.value


# ------------------------------------------------------------- 1. loose Thrift types


def test_case1_one_flipped_bit_makes_an_i32_an_i16(tmp_path: Path) -> None:
    """File byte 4 of a default pyarrow file with fixed_size_list<float>[4]: 0x15 (field 1,
    i32) -> 0x14 (i16). Arrow raises TProtocolException; the page reader must not read
    the damaged file as if intact."""
    good = craft(rows=200, k=4).build()
    assert good[4] == 0x15
    bad = bytearray(good)
    bad[4] = 0x14
    _refused_by_both(bytes(bad))
    _format_error(tmp_path, bytes(bad))


@pytest.mark.parametrize("new_type", [I16, I64, TRUE, FALSE, BYTE, BINARY])
@pytest.mark.parametrize("where", ["kind", "uncompressed", "num_values", "encoding"])
def test_case1_fields_of_another_type_are_declined(where: str, new_type: int) -> None:
    c = craft(rows=100, k=4)
    header = c.pages[data_pages(c)[0]][0]
    target = {
        "kind": get(header, 1),
        "uncompressed": get(header, 2),
        "num_values": get(get(header, 5)[2], 1),
        "encoding": get(get(header, 5)[2], 2),
    }[where]
    target[1] = new_type
    target[2] = {BINARY: b"\x00\x01", TRUE: True, FALSE: False}.get(new_type, target[2])
    assert _ours(c.build()) == {}


# ------------------------------------------------------------- 2. gzip: one member, nothing after


@pytest.mark.parametrize("extra", ["bytes", "member"])
def test_case2_gzip_page_with_bytes_after_its_member(extra: str, tmp_path: Path) -> None:
    c = craft(rows=100, k=4, codec="gzip")
    i = data_pages(c)[0]
    header, body = c.pages[i]
    more = b"\x00garbage" if extra == "bytes" else gzip_member(b"\x00" * 16)
    get(header, 3)[2] += len(more)
    c.pages[i] = (header, body + more)
    _refused_by_both(c.build())
    _format_error(tmp_path, c.build())


# ------------------------------------------------------------- 3. a sub-header given twice


def test_case3_data_page_header_v2_twice_is_declined() -> None:
    """Two data_page_header_v2, the first with is_compressed=false: Arrow merges them,
    the page reader does not try to, so the table is Arrow's (or Arrow's error)."""
    c = craft(rows=100, k=4, codec="snappy", version="2.0", use_dictionary=False)
    i = data_pages(c)[0]
    header, body = c.pages[i]
    v2 = get(header, 8)
    first = copy.deepcopy(v2)
    get(first[2], 7)[2] = False  # is_compressed
    header.insert(header.index(v2), first)
    data = c.build()
    assert _ours(data) == {}
    want = _arrow(data)
    pf = pq.ParquetFile(pa.BufferReader(data))
    if isinstance(want, Exception):
        with pytest.raises(type(want)):
            _read_row_group(pf, pa.BufferReader(data), 0, None, False)
    else:
        assert _read_row_group(pf, pa.BufferReader(data), 0, None, False).equals(want)


@pytest.mark.parametrize("fid", [1, 2, 3, 5])
def test_case3_any_field_twice_is_declined(fid: int) -> None:
    c = craft(rows=100, k=4)
    header = c.pages[data_pages(c)[0]][0]
    field = get(header, fid)
    header.insert(header.index(field) + 1, copy.deepcopy(field))
    assert _ours(c.build()) == {}


# ------------------------------------------------------------- 4. Arrow's limits


def test_case4_a_header_over_16_mib_is_declined(tmp_path: Path) -> None:
    c = craft(rows=100, k=4)
    header = c.pages[data_pages(c)[0]][0]
    header.append([100, BINARY, b"\x00" * (16 * 1024 * 1024)])  # an unknown field
    _refused_by_both(c.build())
    _format_error(tmp_path, c.build())


def test_case4_a_thrift_list_over_a_million_elements_is_declined() -> None:
    c = craft(rows=100, k=4)
    header = c.pages[data_pages(c)[0]][0]
    header.append([100, LIST, (BYTE, [0] * 1_000_001)])
    _refused_by_both(c.build())
    header[-1][2] = (BYTE, [0] * 1_000_000)  # at the limit: Arrow reads it, and so may we
    assert isinstance(_arrow(c.build()), pa.Table)
    assert _ours(c.build())["emb"].equals(c.meta["table"].column("emb").combine_chunks())


# ------------------------------------------------------------- 5. a chunk past the end of the file


def test_case5_a_chunk_running_past_the_end_of_the_file(tmp_path: Path) -> None:
    c = craft(rows=100, k=4)
    c.past_eof = 10_000
    _refused_by_both(c.build())
    _format_error(tmp_path, c.build())


# ------------------------------------------------------------- 6. "503" in a decode error


def test_case6_a_decode_error_saying_503_is_a_format_error_not_a_throttle(tmp_path: Path) -> None:
    """A snappy page whose header says 503 bytes: Arrow's error names 503; it is the
    file's damage (FormatError, quarantined under skip), never retried as an S3 throttle."""
    c = craft(rows=100, k=4, use_dictionary=False)
    header = c.pages[data_pages(c)[0]][0]
    get(header, 2)[2] = 503
    data = c.build()
    want = _arrow(data)
    assert isinstance(want, Exception)
    assert not transient_in_chain(want)
    err = _format_error(tmp_path, data)
    assert not transient_in_chain(err)
    assert not is_transient(pa.ArrowInvalid("Corrupt snappy: expected 503 bytes"))
    assert not is_transient(OSError("Corrupt snappy compressed data"))
    assert not is_transient(FormatError("503 bytes", "f.parquet", "row group 0"))
    assert is_transient(OSError("HTTP 503 Service Unavailable"))  # storage's own words still count


# ------------------------------------------------------------- 7. the gzip bomb


def _bomb(size: int) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = bytes(1 << 24)
    out = [z.compress(block) for _ in range(size >> 24)]
    return b"".join(out) + z.flush()


def test_case7_a_gzip_bomb_is_declined_in_bounded_memory(tmp_path: Path) -> None:
    """A page whose header says 1,662 bytes and whose stream inflates to 1 GiB (from about
    1 MB): at most the declared size (and one byte) is ever inflated. (The 1.5 GiB bomb of
    the issue, timed against Arrow: benchmarks/hostile_bomb.py.)"""
    bomb = _bomb(1 << 30)
    tracemalloc.start()
    try:
        with pytest.raises(Unreadable, match="longer than its header"):
            inflate(memoryview(bomb), 1662, "GZIP")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * len(bomb) + (1 << 16), (peak, len(bomb))  # the input's size, not 1 GiB
    c = craft(rows=100, k=4, codec="gzip", use_dictionary=False)
    i = data_pages(c)[0]
    header, _ = c.pages[i]
    get(header, 2)[2] = 1662
    get(header, 3)[2] = len(bomb)
    c.pages[i] = (header, bomb)
    data = c.build()
    assert _ours(data) == {}
    _format_error(tmp_path, data)


# ------------------------------------------------------------- 9. padding costs no time per byte


def test_case9_padding_is_stepped_over_or_declined_without_a_step_per_byte() -> None:
    c = craft(rows=100, k=4)
    header = c.pages[data_pages(c)[0]][0]
    for padding, declined in (
        ([100, BINARY, b"\x00" * (15 * 1024 * 1024)], False),  # one string: stepped over
        ([100, LIST, (BYTE, [0] * 1_000_000)], False),  # fixed-width elements: stepped over
        ([100, LIST, (I32, [1] * 100_000)], True),  # elements to read one by one
        ([100, STRUCT, [[j, TRUE, True] for j in range(1, 60_000)]], True),  # fields
    ):
        b = memoryview(encode_struct([*header, padding]))
        if declined:
            with pytest.raises(Unreadable, match=f"more than {MAX_ITEMS}"):
                read_page(b, 0)
        else:
            assert read_page(b, 0).items < 64


# ------------------------------------------------------------- 8. no hidden failures


def test_a_bug_in_the_page_reader_fails_instead_of_declining(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import shardwise.formats.parquet._fixedlist as fixedlist

    def broken(*args: Any) -> bool:
        raise TypeError("a bug")

    monkeypatch.setattr(fixedlist, "check_rows", broken)
    data = craft(rows=100, k=4).build()
    with pytest.raises(TypeError, match="a bug"):
        _ours(data)


def test_a_declined_column_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    c = craft(rows=100, k=4)
    c.past_eof = 10_000
    with caplog.at_level(logging.DEBUG, logger="shardwise.formats.parquet"):
        assert _ours(c.build()) == {}
    assert any(
        "'emb'" in r.getMessage()
        and "left to Arrow" in r.getMessage()
        and "file of" in r.getMessage()
        for r in caplog.records
    ), caplog.text


def test_one_switch_turns_the_page_reader_off_for_the_pipeline_and_the_loader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SHARDWISE_PAGE_READER=0: neither read_unit (the pipeline's reads) nor read_table
    (the loader's) calls the page reader; the rows are the same."""
    import shardwise.formats.parquet.format as parquet

    calls: list[str] = []

    def spy(*args: Any) -> dict[str, pa.Array]:
        out = read_fixed_lists(*args)
        calls.extend(out)
        return out

    monkeypatch.setattr(parquet, "read_fixed_lists", spy)
    c = craft(rows=100, k=4)
    path = tmp_path / "emb.parquet"
    path.write_bytes(c.build())
    fmt = get_format("parquet")
    unit = fmt.list_units(str(path), path.stat().st_size)[0]
    for off in (False, True):
        if off:
            monkeypatch.setenv("SHARDWISE_PAGE_READER", "0")
        calls.clear()
        assert fmt.read_table(unit).equals(c.meta["table"])
        assert pa.Table.from_batches(list(fmt.read_unit(unit))).equals(c.meta["table"])
        assert calls == ([] if off else ["emb", "emb"])


# ------------------------------------------------------------- object storage (Python files)


def test_a_python_file_is_read_by_the_page_reader_and_its_failures_are_storage_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A file on an fsspec store (a Python file, no ``read_at``): the page reader reads
    it; a read that fails there is a StorageError naming the file and row group, whose
    cause (a dropped connection) keeps it retryable; a damaged one stays a FormatError."""
    import fsspec

    import shardwise.formats.parquet.format as parquet
    from shardwise.errors import StorageError

    c = craft(rows=100, k=4)
    fs = fsspec.filesystem("memory")
    fs.pipe("/hostile/emb.parquet", c.build())
    url = "memory://hostile/emb.parquet"
    fmt = get_format("parquet")
    unit = fmt.list_units(url, len(c.build()))[0]
    calls: list[str] = []

    def spy(*args: Any) -> dict[str, pa.Array]:
        out = read_fixed_lists(*args)
        calls.extend(out)
        return out

    monkeypatch.setattr(parquet, "read_fixed_lists", spy)
    assert fmt.read_table(unit).equals(c.meta["table"]) and calls == ["emb"]

    real_open = parquet.open_arrow_input

    def dropping(path: str, **opts: Any) -> Any:
        f = real_open(path, **opts)

        def read(*args: Any) -> bytes:
            raise ConnectionResetError("reset by peer")

        f.read = read
        return f

    monkeypatch.setattr(parquet, "open_arrow_input", dropping)
    with pytest.raises(StorageError, match="reset by peer") as err:
        fmt.read_table(unit)
    assert url in str(err.value) and transient_in_chain(err.value)

    monkeypatch.setattr(parquet, "open_arrow_input", real_open)
    c.past_eof = 10_000
    fs.pipe("/hostile/emb.parquet", c.build())
    with pytest.raises(FormatError, match="row group 0: cannot decode column 'emb'"):
        fmt.read_table(unit)
    fs.rm("/hostile", recursive=True)


def test_a_page_that_does_not_decompress_is_named_by_number_and_byte(tmp_path: Path) -> None:
    """Arrow's message names neither the column nor the page; the FormatError names both:
    the page's number in its chunk and the byte of the file where its header starts."""
    import numpy as np

    from shardwise.formats.parquet._chunk import chunk_start

    values = np.random.default_rng(0).integers(0, 2**62, 4000)
    path = tmp_path / "pages.parquet"
    pq.write_table(
        pa.table({"id": np.arange(4000), "x": values}),
        path,
        compression="snappy",
        data_page_size=2048,
        write_batch_size=256,
        use_dictionary=False,
        write_statistics=False,
    )
    data = bytearray(path.read_bytes())
    chunk = pq.ParquetFile(path).metadata.row_group(0).column(1)
    start = chunk_start(chunk)
    b = memoryview(bytes(data[start : start + chunk.total_compressed_size]))
    pos, headers = 0, []
    while pos < len(b):
        page = read_page(b, pos)
        headers.append((pos, page.body))
        pos = page.body + page.compressed
    assert len(headers) > 4
    header, body = headers[2]
    data[start + body] ^= 0x40  # the third page's snappy stream now opens with another length
    fmt = get_format("parquet")
    hostile = tmp_path / "hostile.parquet"
    hostile.write_bytes(bytes(data))
    unit = fmt.list_units(str(hostile), len(data))[0]
    with pytest.raises(FormatError) as err:
        fmt.read_table(unit)
    message = str(err.value)
    assert "column 'x'" in message and "row group 0" in message, message
    assert f"page 3, its header at byte {start + header} of the file" in message, message
