"""Parquet footers parsed once per process (formats/parquet/footers.py): a file opened
again is given the metadata of its last open only while its footer's bytes are the same."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import FormatError
from shardwise.formats import get_format
from shardwise.formats.parquet import footers
from shardwise.formats.parquet.footers import ParsedFile, _Footers


def _write(path: Path, start: int, rows: int = 300, group: int = 50) -> None:
    table = pa.table(
        {"id": pa.array(range(start, start + rows), pa.int64()), "s": [str(i) for i in range(rows)]}
    )
    pq.write_table(table, path, row_group_size=group)


def _read(cache: _Footers, path: Path, group: int) -> pa.Table:
    source = pa.memory_map(str(path))
    return cache.open(str(path), source).read_row_group(group, use_threads=False)


def test_a_file_opened_again_reuses_its_parsed_footer(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    _write(path, 0)
    cache = _Footers(1 << 20)
    first = cache.open(str(path), pa.memory_map(str(path)))
    again = cache.open(str(path), pa.memory_map(str(path)))
    assert (cache.parsed, cache.reused) == (1, 1)
    assert isinstance(again, ParsedFile) and not isinstance(first, ParsedFile)
    plain = pq.ParquetFile(str(path))
    assert again.schema_arrow.equals(plain.schema_arrow, check_metadata=True)
    assert again.metadata.equals(plain.metadata)
    for g in range(plain.num_row_groups):
        assert again.read_row_group(g).equals(plain.read_row_group(g))


def test_a_file_rewritten_in_place_is_parsed_again(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    _write(path, 0)
    cache = _Footers(1 << 20)
    assert _read(cache, path, 1)["id"][0].as_py() == 50
    _write(path, 1000)  # the same size and layout, other values (and statistics)
    assert _read(cache, path, 1)["id"][0].as_py() == 1050
    _write(path, 1000, group=100)  # other row groups
    assert _read(cache, path, 1)["id"][0].as_py() == 1100
    assert (cache.parsed, cache.reused) == (3, 0)


def test_only_plain_local_footers_are_kept(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    _write(path, 0)
    cache = _Footers(1 << 20)
    data = path.read_bytes()
    for _ in range(2):  # a Python file (a remote store's): opened as before, nothing kept
        got = cache.open(str(path), pa.PythonFile(io.BytesIO(data), mode="r"))
        assert got.metadata.num_rows == 300
    for _ in range(2):
        assert cache.open(str(path), pa.OSFile(str(path))).metadata.num_rows == 300
    assert (cache.parsed, cache.reused) == (1, 1)
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(data[:-3] + b"XYZ")  # no magic: Arrow reports it, nothing kept
    for _ in range(2):
        with pytest.raises(pa.ArrowInvalid):
            cache.open(str(bad), pa.memory_map(str(bad)))
    short = tmp_path / "short.parquet"
    short.write_bytes(b"PAR1")
    with pytest.raises(pa.ArrowInvalid):
        cache.open(str(short), pa.memory_map(str(short)))
    assert (cache.parsed, cache.reused) == (1, 1)


def test_a_damaged_footer_length_is_arrows_to_report(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    _write(path, 0)
    data = bytearray(path.read_bytes())
    data[-8:-4] = (len(data) * 2).to_bytes(4, "little")  # reaches before the file's start
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="a.parquet"):
        get_format("parquet").list_units(str(path), len(data))


def test_the_footers_kept_stay_under_their_budget(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.parquet" for i in range(4)]
    for i, p in enumerate(paths):
        _write(p, i)
    size = pq.ParquetFile(str(paths[0])).metadata.serialized_size + 8
    cache = _Footers(2 * size + 1)  # two of them
    for p in paths:
        _read(cache, p, 0)
    _read(cache, paths[3], 0)
    _read(cache, paths[2], 0)
    assert (cache.parsed, cache.reused) == (4, 2)
    _read(cache, paths[0], 0)  # let go: parsed again
    assert (cache.parsed, cache.reused) == (5, 2)
    assert cache._bytes <= cache.keep_bytes and len(cache._kept) == 2
    tiny = _Footers(10)  # a footer over the budget is never kept
    _read(tiny, paths[0], 0)
    _read(tiny, paths[0], 0)
    assert (tiny.parsed, tiny.reused, len(tiny._kept)) == (2, 0, 0)


def test_threads_opening_the_same_files_read_their_own_rows(tmp_path: Path) -> None:
    paths = [tmp_path / f"{i}.parquet" for i in range(3)]
    for i, p in enumerate(paths):
        _write(p, 1000 * i)
    cache = _Footers(1 << 20)
    wrong: list[tuple[int, int]] = []

    def work(t: int) -> None:
        for k in range(60):
            i, g = (t + k) % 3, k % 6
            got = _read(cache, paths[i], g)["id"].to_pylist()
            if got != list(range(1000 * i + 50 * g, 1000 * i + 50 * g + 50)):
                wrong.append((i, g))

    threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong
    assert cache.reused >= 300


def test_unit_reads_of_one_file_parse_its_footer_once(tmp_path: Path) -> None:
    path = tmp_path / "a.parquet"
    _write(path, 0)
    fmt = get_format("parquet")
    units = fmt.list_units(str(path), os.path.getsize(path))
    parsed, reused = footers._FOOTERS.parsed, footers._FOOTERS.reused
    rows = [fmt.read_table(u).column("id").to_pylist() for u in units]
    assert rows == [list(range(50 * g, 50 * g + 50)) for g in range(6)]
    assert footers._FOOTERS.parsed == parsed  # list_units parsed it
    assert footers._FOOTERS.reused == reused + 6
