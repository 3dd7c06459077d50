"""JSONL (formats/jsonl/: format.py, _lines.py, _rules.py): line-aligned byte ranges (property-
based), blank lines, compressed files as one streamed unit, the writer's encoding, bad
records named by file and line or quarantined, truncated or fake compression, deep
nesting, and the mixed-type rule."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import _formatdata as fd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import FormatError
from shardwise.formats import Quarantine, detect_format, get_format
from shardwise.formats.jsonl import JsonlFormat
from shardwise.index import index_dataset
from shardwise.loader import StreamingDataset

# --------------------------------------------------------------------------- ranges and counts


_BLANKS = ["", "   ", "\t", " \r", "\r"]


record = st.one_of(
    st.builds(lambda s: ("rec", s), st.text(max_size=12)),
    st.sampled_from(_BLANKS).map(lambda b: ("blank", b)),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(record, min_size=0, max_size=60),
    trailing_newline=st.booleans(),
    crlf=st.booleans(),
    unit_bytes=st.integers(min_value=1, max_value=400),
    block_bytes=st.integers(min_value=1, max_value=200),
)
def test_jsonl_ranges_give_every_record_once(
    lines: list[tuple[str, str]],
    trailing_newline: bool,
    crlf: bool,
    unit_bytes: int,
    block_bytes: int,
) -> None:
    texts, expected = [], []
    for kind, value in lines:
        if kind == "rec":
            texts.append(json.dumps({"i": len(expected), "s": value}, ensure_ascii=False))
            expected.append(value)
        else:
            texts.append(value)
    sep = "\r\n" if crlf else "\n"
    body = sep.join(texts) + (sep if trailing_newline and texts else "")
    data = body.encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.jsonl")
        with open(path, "wb") as f:
            f.write(data)
        fmt = JsonlFormat(unit_bytes=unit_bytes, block_bytes=block_bytes)
        units = fmt.list_units(path, len(data))
        # ranges tile the file exactly and each starts at a line start
        assert units[0].start == 0 and units[-1].end == len(data)
        for a, b in zip(units, units[1:]):
            assert a.end == b.start
            assert data[b.start - 1 : b.start] == b"\n"
        assert [u.index for u in units] == list(range(len(units)))
        # first_line matches the newline count before the range
        for u in units:
            assert u.first_line == data[: u.start].count(b"\n") + 1
        assert sum(u.num_samples for u in units) == len(expected)
        schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
        got: list[Any] = []
        for u in units:
            rows = [r for b in fmt.read_unit(u, schema=schema) for r in b.to_pylist()]
            assert len(rows) == u.num_samples
            got.extend(rows)
        assert [r["i"] for r in got] == list(range(len(expected)))
        assert [r["s"] for r in got] == expected


def _write_lines(path: Path, lines: list[bytes]) -> None:
    path.write_bytes(b"".join(lines))


@settings(max_examples=30, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 300), min_size=1, max_size=60),
    unit_bytes=st.integers(1, 2_000),
    block_bytes=st.integers(1, 700),
    blank_every=st.integers(0, 5),
    trailing_newline=st.booleans(),
)
def test_jsonl_ranges_of_long_unicode_lines_give_every_record_once(
    tmp_path_factory: pytest.TempPathFactory,
    lengths: list[int],
    unit_bytes: int,
    block_bytes: int,
    blank_every: int,
    trailing_newline: bool,
) -> None:
    root = tmp_path_factory.mktemp("ranges")
    lines = []
    for i, n in enumerate(lengths):
        lines.append(json.dumps({"id": i, "t": "é" * n}).encode() + b"\n")
        if blank_every and i % blank_every == 0:
            lines.append(b"\n")
    if not trailing_newline:
        lines[-1] = lines[-1].rstrip(b"\n")
        if not lines[-1]:
            lines.pop()
    path = root / "data.jsonl"
    _write_lines(path, lines)
    fmt = JsonlFormat(unit_bytes=unit_bytes, block_bytes=block_bytes)
    units = fmt.list_units(str(path), path.stat().st_size)
    assert units[0].start == 0 and units[-1].end == path.stat().st_size
    assert all(a.end == b.start for a, b in zip(units, units[1:]))
    ids = []
    for u in units:
        got = [r["id"] for b in fmt.read_unit(u) for r in b.to_pylist()]
        assert len(got) == u.num_samples
        ids.extend(got)
    assert ids == list(range(len(lengths)))


def test_jsonl_many_units_cover_a_file(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(5000):
            f.write(json.dumps({"i": i, "t": "ü" * (i % 17)}, ensure_ascii=False) + "\n")
    fmt = JsonlFormat(unit_bytes=4096, block_bytes=1000)
    units = fmt.list_units(str(path), path.stat().st_size)
    assert len(units) > 20
    assert all(u.num_bytes <= 4096 + 60 for u in units)
    ids = [
        i for u in units for b in fmt.read_unit(u, columns=["i"]) for i in b.column("i").to_pylist()
    ]
    assert ids == list(range(5000))


def test_jsonl_blank_lines_are_not_records(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'\n{"a":1}\n\n   \n{"a":2}\r\n\t\r\n \n{"a":3}\n\n')
    fmt = get_format("jsonl")
    units = fmt.list_units(str(path), path.stat().st_size)
    assert sum(u.num_samples for u in units) == 3
    rows = [r for u in units for b in fmt.read_unit(u) for r in b.to_pylist()]
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}]
    index = index_dataset(str(path), progress=False, cache_dir=str(tmp_path / "cache"))
    assert index.num_samples == 3


def test_jsonl_last_line_without_newline_is_a_record(tmp_path: Path) -> None:
    path = tmp_path / "n.jsonl"
    path.write_bytes(b'{"a":1}\n{"a":2}')
    fmt = get_format("jsonl")
    units = fmt.list_units(str(path), path.stat().st_size)
    assert [u.num_samples for u in units] == [2]
    assert [r for b in fmt.read_unit(units[0]) for r in b.to_pylist()] == [{"a": 1}, {"a": 2}]


def test_jsonl_read_schema_infers_types(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(
        '{"i": 1, "f": 0.5, "s": "x", "n": null}\n{"i": 2, "f": null, "s": null, "n": null}\n'
    )
    schema = get_format("jsonl").read_schema(str(path))
    assert schema == pa.schema(
        [("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("n", pa.string())]
    )


# --------------------------------------------------------------------------- compressed files


@pytest.mark.parametrize("codec,suffix", [("gzip", ".jsonl.gz"), ("zstd", ".jsonl.zst")])
def test_compressed_jsonl_is_one_whole_file_unit(tmp_path: Path, codec: str, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    rows = [{"i": i, "s": fd.TEXTS[i % len(fd.TEXTS)]} for i in range(3000)]
    with pa.OSFile(str(path), "wb") as raw, pa.CompressedOutputStream(raw, codec) as out:
        for i, r in enumerate(rows):
            out.write((json.dumps(r, ensure_ascii=False) + "\n").encode())
            if i % 500 == 0:
                out.write(b"\n")  # blank lines inside the stream are not records
    assert detect_format(str(path)) == "jsonl"
    fmt = JsonlFormat(unit_bytes=1024, block_bytes=4096)  # unit_bytes must not split it
    size = path.stat().st_size
    units = fmt.list_units(str(path), size)
    assert len(units) == 1
    assert (units[0].num_samples, units[0].start, units[0].end, units[0].num_bytes) == (
        3000,
        0,
        size,
        size,
    )
    got = [r for b in fmt.read_unit(units[0]) for r in b.to_pylist()]
    assert got == rows
    index = index_dataset(str(path), progress=False, cache_dir=str(tmp_path / "cache"))
    assert index.num_samples == 3000 and index.num_units == 1


def test_compressed_jsonl_files_are_one_unit_each(tmp_path: Path) -> None:
    rows = [json.dumps({"id": i, "text": f"row {i}"}).encode() + b"\n" for i in range(5000)]
    with gzip.open(tmp_path / "a.jsonl.gz", "wb") as f:
        f.writelines(rows)
    with pa.CompressedOutputStream(str(tmp_path / "b.jsonl.zst"), "zstd") as f:
        f.write(b"".join(rows))
    index = index_dataset(str(tmp_path), progress=False, block_bytes=4096)
    assert [u.num_samples for u in index.units] == [5000, 5000]
    assert sorted(fd.read_everything(str(tmp_path)).column("id").to_pylist()) == sorted(
        list(range(5000)) * 2
    )


def test_compressed_jsonl_error_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl.gz"
    with pa.OSFile(str(path), "wb") as raw, pa.CompressedOutputStream(raw, "gzip") as out:
        out.write(b'{"a":1}\n{"a":2}\n\n{"a":\n{"a":5}\n')
    fmt = get_format("jsonl")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    with pytest.raises(FormatError) as err:
        list(fmt.read_unit(unit))
    assert str(path) in str(err.value) and "line 4" in str(err.value)


def test_truncated_or_fake_compressed_jsonl_names_the_file(tmp_path: Path) -> None:
    good = "".join(
        json.dumps({"id": i, "text": f"row {i}", "tags": [i, i + 1]}) + "\n" for i in range(5000)
    ).encode()
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.jsonl.gz").write_bytes(gzip.compress(good)[:-50])
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / "a.jsonl.gz").write_bytes(good)
    for sub, what in (("t", "cannot decompress gzip"), ("f", "not gzip-compressed")):
        with pytest.raises(FormatError, match=what) as info:
            index_dataset(str(tmp_path / sub), progress=False)
        assert "a.jsonl.gz" in str(info.value) and "line " in str(info.value)


@pytest.mark.parametrize("codec", ["gzip", "zstd"])
def test_truncated_compressed_jsonl_under_skip_keeps_what_came_before(
    tmp_path: Path, codec: str
) -> None:
    """Under on_error="skip" a damaged compressed file gives its records up to the damage
    and one quarantined record naming the line where decompression stopped (counted as
    skipped while indexing); under "raise" it is the same error naming that line."""
    good = "".join(
        json.dumps({"id": i, "text": f"row {i} " * (i % 9)}) + "\n" for i in range(20_000)
    ).encode()
    packed = gzip.compress(good) if codec == "gzip" else pa.compress(good, "zstd", asbytes=True)
    suffix = ".gz" if codec == "gzip" else ".zst"
    (tmp_path / f"a.jsonl{suffix}").write_bytes(packed[: len(packed) * 2 // 3])
    (tmp_path / "b.jsonl").write_text('{"id": 99999, "text": "b"}\n')
    with pytest.raises(FormatError, match="line [1-9][0-9]+") as info:
        index_dataset(str(tmp_path), progress=False)
    stopped = int(str(info.value).split("line ")[1].split(":")[0])
    index = index_dataset(str(tmp_path), progress=False, on_error="skip", refresh=True)
    assert index.summary()["skipped"] == 1 and index.num_samples == stopped - 1 + 1 > 1000
    ds = StreamingDataset(index, shuffle=False, rank=0, world_size=1, on_error="skip")
    assert [int(r["id"]) for r in ds] == [*range(stopped - 1), 99999]
    assert ds.quarantine.count == 1
    where = ds.quarantine.examples[0]
    assert (
        where[0].endswith(f"a.jsonl{suffix}")
        and where[1] == f"line {stopped}"
        and "rest of the file" in where[2]
    )


@pytest.mark.parametrize(
    "text",
    [
        "null",
        "\n\n\n\n\n\nnull",
        '{"a": 1}\nnull\n{"a": 2}',
        '  null\n{"a": 3}',
        '{"a": 1}\n7\n"x"\n[1]\ntrue',
    ],
)
def test_lines_that_are_not_objects_are_bad_records_and_never_crash_arrow(
    tmp_path: Path, text: str
) -> None:
    """Arrow's JSON parser crashes the interpreter on a `null` line at the start of a block
    and reads it as a row of nulls after an object: such lines never reach it."""
    (tmp_path / "r.jsonl").write_text(text)
    lines = text.split("\n")
    objects = [json.loads(x) for x in lines if x.strip().startswith("{")]
    bad = [i + 1 for i, x in enumerate(lines) if x.strip() and not x.strip().startswith("{")]
    with pytest.raises(FormatError, match=f"line {bad[0]}: expected a JSON object"):
        list(StreamingDataset(str(tmp_path), shuffle=False, rank=0, world_size=1, refresh=True))
    if not objects:
        return
    ds = StreamingDataset(
        str(tmp_path), shuffle=False, rank=0, world_size=1, on_error="skip", refresh=True
    )
    assert [dict(r) for r in ds] == objects
    assert [e[1] for e in ds.quarantine.examples] == [f"line {n}" for n in bad]


# --------------------------------------------------------------------------- writer


def test_jsonl_round_trip_binary_becomes_base64(tmp_path: Path) -> None:
    table = pa.table({"k": ["a", "b"], "blob": pa.array([b"\x00\xff\x10", None], pa.binary())})
    written = fd.write("jsonl", str(tmp_path / "j"), table, batch_rows=10)
    lines = Path(written[0].path).read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == [{"k": "a", "blob": "AP8Q"}, {"k": "b", "blob": None}]


def test_jsonl_writer_keeps_unicode_unescaped(tmp_path: Path) -> None:
    table = pa.table({"t": ["日本語", "🚀"]})
    written = fd.write("jsonl", str(tmp_path / "u"), table, batch_rows=10)
    raw = Path(written[0].path).read_bytes()
    assert raw == '{"t":"日本語"}\n{"t":"🚀"}\n'.encode()


def test_jsonl_writer_keeps_durations_and_nanosecond_times_exact(tmp_path: Path) -> None:
    table = pa.table(
        {
            "dur": pa.array([-5, 2**62, None], pa.duration("ns")),
            "sec": pa.array([90, 0, 1], pa.duration("s")),
            "tod": pa.array([1, 86_399_999_999_999, None], pa.time64("ns")),
            "x": [float("nan"), float("inf"), 1.5],
        }
    )
    written = fd.write("jsonl", str(tmp_path / "d"), table, batch_rows=10)
    rows = [json.loads(x) for x in Path(written[0].path).read_text().splitlines()]
    assert [r["dur"] for r in rows] == [-5, 2**62, None]
    assert [r["sec"] for r in rows] == [90, 0, 1]
    assert [r["tod"] for r in rows] == ["00:00:00.000000001", "23:59:59.999999999", None]
    assert str(rows[0]["x"]) == "nan" and rows[1]["x"] == float("inf")


def test_jsonl_writer_refuses_a_decimal_column_by_name(tmp_path: Path) -> None:
    table = pa.table({"id": [0], "price": pa.array([1], pa.decimal128(5, 2))})
    with pytest.raises(FormatError, match="column 'price' is decimal128"):
        fd.write("jsonl", str(tmp_path / "p"), table, batch_rows=10)


# --------------------------------------------------------------------------- bad records


def _bad_file(tmp_path: Path, bad_line: int, bad: bytes, n: int = 200) -> Path:
    lines = [json.dumps({"i": i, "s": f"row {i}"}).encode() for i in range(n)]
    lines.insert(bad_line - 1, bad)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


BAD_LINES = {
    "malformed": b'{"i": 1, "s": ',
    "truncated-string": b'{"i": 7, "s": "unterminated}',
    "invalid-utf8": b'{"i": 3, "s": "bad \xff\xfe bytes"}',
    "not-an-object": b"[1, 2, 3]",
    "wrong-type": b'{"i": "seven", "s": "x"}',
    "extra-field": b'{"i": 1, "s": "x", "zzz": 1}',
    # values Arrow's reader refuses, which a build by from_pylist would convert
    "float-into-int": b'{"i": 12.5, "s": "x"}',
    "integral-float-into-int": b'{"i": 12.0, "s": "x"}',
    "bool-into-int": b'{"i": true, "s": "x"}',
    "number-into-string": b'{"i": 1, "s": 5}',
    "not-json-nan": b'{"i": NaN, "s": "x"}',
}


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
@pytest.mark.parametrize("bad_line", [1, 57, 201])
def test_jsonl_bad_line_raises_with_path_and_line(tmp_path: Path, kind: str, bad_line: int) -> None:
    path = _bad_file(tmp_path, bad_line, BAD_LINES[kind])
    fmt = JsonlFormat(unit_bytes=700, block_bytes=300)
    units = fmt.list_units(str(path), path.stat().st_size)
    assert len(units) > 3
    schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    with pytest.raises(FormatError) as err:
        for u in units:
            list(fmt.read_unit(u, schema=schema))
    msg = str(err.value)
    assert str(path) in msg
    assert f"line {bad_line}" in msg and f"line {bad_line}0" not in msg
    assert err.value.path == str(path) and err.value.location == f"line {bad_line}"
    if kind == "invalid-utf8":
        assert "UTF-8" in msg


@pytest.mark.parametrize("kind", sorted(BAD_LINES))
def test_jsonl_bad_line_is_quarantined_under_skip(tmp_path: Path, kind: str) -> None:
    path = _bad_file(tmp_path, 57, BAD_LINES[kind])
    fmt = JsonlFormat(unit_bytes=700, block_bytes=300)
    units = fmt.list_units(str(path), path.stat().st_size)
    schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    q = Quarantine()
    rows = [
        r
        for u in units
        for b in fmt.read_unit(u, schema=schema, on_error="skip", quarantine=q)
        for r in b.to_pylist()
    ]
    assert [r["i"] for r in rows] == list(range(200))
    assert q.count == 1
    (where,) = q.examples
    assert where[0] == str(path) and where[1] == "line 57" and where[2]
    # the index counts the bad line as a record, the read yields one fewer
    assert sum(u.num_samples for u in units) == 201


def test_quarantine_counts_beyond_examples(tmp_path: Path) -> None:
    lines = [b"{oops" if i % 2 else json.dumps({"i": i}).encode() for i in range(100)]
    path = tmp_path / "many.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    fmt = get_format("jsonl")
    q = Quarantine(max_examples=5)
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    ids = [
        r["i"] for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for r in b.to_pylist()
    ]
    assert ids == list(range(0, 100, 2))
    assert q.count == 50 and len(q.examples) == 5
    assert [e[1] for e in q.examples] == ["line 2", "line 4", "line 6", "line 8", "line 10"]
    total = Quarantine(max_examples=7)
    total.merge(q)
    total.merge(q)
    assert total.count == 100 and len(total.examples) == 7


def test_malformed_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps({"id": i}).encode() + b"\n" for i in range(10)]
    lines[6] = b'{"id": 6, oops\n'
    _write_lines(path, lines)
    with pytest.raises(FormatError) as info:
        fd.read_everything(str(path))
    assert str(path) in str(info.value) and "line 7" in str(info.value)
    lines[6] = b'{"id": 6, "s": "open\n'
    _write_lines(path, lines)
    with pytest.raises(FormatError, match=r"\(Unterminated string starting at column 16\)"):
        fd.read_everything(str(path))

    fmt = get_format("jsonl")
    q = Quarantine()
    [unit] = index_dataset(str(path), progress=False, refresh=True).units
    ids = [
        r["id"] for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for r in b.to_pylist()
    ]
    assert ids == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert q.count == 1 and q.examples[0][0] == str(path) and "line 7" in q.examples[0][1]


@pytest.mark.parametrize("between", [b"\t", b" ", b"", b"\r"])
def test_a_line_holding_two_objects_is_one_bad_record(tmp_path: Path, between: bytes) -> None:
    """Arrow's parser reads objects separated by any whitespace as two rows; the index
    counts lines, so such a line is one bad record, never two rows (found by the fuzz
    test: a newline flipped to a tab gave 60 rows where 59 records were counted)."""
    path = tmp_path / "two.jsonl"
    lines = [json.dumps({"id": i}).encode() + b"\n" for i in range(10)]
    lines[3] = b'{"id": 3}' + between + b'{"id": 4}\n'
    del lines[4]
    _write_lines(path, lines)
    with pytest.raises(FormatError) as info:
        fd.read_everything(str(path))
    assert str(path) in str(info.value) and "line 4" in str(info.value)
    index = index_dataset(str(path), progress=False, refresh=True, on_error="skip")
    ds = StreamingDataset(index, shuffle=False, rank=0, world_size=1, on_error="skip")
    ids = [int(r["id"]) for r in ds]
    assert ids == [0, 1, 2, 5, 6, 7, 8, 9]
    assert index.num_samples == 9 and ds.quarantine.count == 1


def test_invalid_utf8_and_non_objects_are_bad_records(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    _write_lines(
        path, [b'{"id": 0}\n', b'{"id": 1, "t": "\xff\xfe"}\n', b"[1, 2]\n", b"\n", b'{"id": 4}\n']
    )
    fmt = get_format("jsonl")
    unit = fmt.list_units(str(path), path.stat().st_size)[0]
    assert unit.num_samples == 4  # the blank line is not a record
    with pytest.raises(FormatError, match="line 2"):
        list(fmt.read_unit(unit, schema=pa.schema([("id", pa.int64()), ("t", pa.string())])))
    q = Quarantine()
    got = [
        r["id"]
        for b in fmt.read_unit(
            unit,
            on_error="skip",
            quarantine=q,
            schema=pa.schema([("id", pa.int64()), ("t", pa.string())]),
        )
        for r in b.to_pylist()
    ]
    assert got == [0, 4]
    assert q.count == 2
    assert [e[1] for e in q.examples] == ["line 2", "line 3"]


def test_deeply_nested_records_are_bad_records_not_crashes(tmp_path: Path) -> None:
    deep = '{"id": 1, "x": ' + "[" * 50_000 + "]" * 50_000 + "}"
    fine = '{"id": 2, "x": ' + "[" * 10 + "]" * 10 + "}"
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"id": 0, "x": []}) + "\n" + deep + "\n" + fine + "\n"
    )
    with pytest.raises(FormatError, match="line 2: record nested deeper than 64 levels"):
        list(StreamingDataset(str(tmp_path / "d.jsonl"), shuffle=False, rank=0, world_size=1))
    ds = StreamingDataset(
        str(tmp_path / "d.jsonl"), shuffle=False, on_error="skip", rank=0, world_size=1
    )
    assert [r["id"] for r in ds] == [0, 2] and ds.quarantine.count == 1


# --------------------------------------------------------------------------- mixed types


def test_mixed_type_fields_become_json_text(tmp_path: Path) -> None:
    rows = [
        {"id": 0, "v": [1, "a"], "n": 1},
        {"id": 1, "v": 2, "n": 2},
        {"id": 2, "v": "x", "n": 3},
        {"id": 3, "v": {"k": None}, "n": 4},
        {"id": 4, "v": None, "n": 5},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = list(StreamingDataset(str(tmp_path / "m.jsonl"), shuffle=False, rank=0, world_size=1))
    assert [r["v"] for r in got] == ['[1,"a"]', "2", "x", '{"k":null}', None]
    assert [r["n"] for r in got] == [1, 2, 3, 4, 5]  # an unmixed field keeps its type


def test_lone_surrogate_escape_is_a_bad_record(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(
        b'{"id": 0, "v": "a"}\n{"id": 1, "v": "x\\ud800"}\n{"id": 2, "v": "\\ud83d\\ude80"}\n'
    )
    with pytest.raises(FormatError, match="line 2: a string holds a lone UTF-16 surrogate"):
        list(StreamingDataset(str(path), shuffle=False, rank=0, world_size=1))
    ds = StreamingDataset(str(path), shuffle=False, on_error="skip", rank=0, world_size=1)
    assert [r["v"] for r in ds] == ["a", "🚀"] and ds.quarantine.count == 1


def _parquet_of_one() -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"a": [1]}), buf)
    return buf.getvalue()


def _tar_of_one() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        tf.addfile(tarfile.TarInfo("a.txt"), io.BytesIO(b""))
    return buf.getvalue()


@pytest.mark.parametrize(
    "what,make",
    [
        ("Parquet file", _parquet_of_one),
        ("tar file", _tar_of_one),
        ("gzip-compressed", lambda: gzip.compress(b'{"a": 1}\n')),
        ("zstd-compressed", lambda: pa.compress(b'{"a": 1}\n', "zstd", asbytes=True)),
    ],
)
@pytest.mark.parametrize("name", ["data", "data.jsonl"])
def test_a_file_that_is_not_json_lines_is_refused_while_indexing(
    tmp_path: Path, what: str, make: Any, name: str
) -> None:
    path = tmp_path / name
    path.write_bytes(make())
    with pytest.raises(FormatError, match=f"not JSON lines: this is a?n? ?{what}") as info:
        index_dataset(str(path), format="jsonl", progress=False)
    assert str(path) in str(info.value)


@pytest.mark.parametrize("first", ["a", "b"])
def test_types_mixed_between_files_follow_one_rule_whatever_the_order(
    tmp_path: Path, first: str
) -> None:
    files = {
        "a": [{"v": 1, "n": None, "f": 1}, {"v": 2, "n": None, "f": 2}],
        "b": [{"v": "x", "n": 7, "f": 2.5}, {"v": [1], "n": None, "f": 3}],
    }
    for name, rows in files.items():  # the file named 0.jsonl is indexed first
        (tmp_path / f"{0 if name == first else 1}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    index = index_dataset(str(tmp_path), progress=False)
    assert [(f.name, f.type) for f in index.schema] == [
        ("v", pa.string()),
        ("n", pa.int64()),
        ("f", pa.float64()),
    ]
    got = sorted(
        (str(r["v"]), r["n"], r["f"])
        for r in StreamingDataset(index, shuffle=False, rank=0, world_size=1)
    )
    assert got == [("1", None, 1.0), ("2", None, 2.0), ("[1]", None, 3.0), ("x", 7, 2.5)]


def test_a_field_seen_only_as_null_stores_later_values_as_json_text(tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    filler = "".join(
        json.dumps({"i": i, "v": None, "pad": "p" * 200}) + "\n" for i in range(12000)
    )  # > 2 MiB
    path.write_text(
        filler
        + json.dumps({"i": 12000, "v": 5, "pad": ""})
        + "\n"
        + json.dumps({"i": 12001, "v": "s", "pad": ""})
        + "\n"
    )
    rows = list(
        StreamingDataset(str(path), shuffle=False, rank=0, world_size=1, columns=["i", "v"])
    )
    assert len(rows) == 12002 and rows[-2:] == [{"i": 12000, "v": "5"}, {"i": 12001, "v": "s"}]


@pytest.mark.parametrize("bad_line", [False, True])
def test_a_byte_order_mark_at_the_start_is_ignored_on_every_path(
    tmp_path: Path, bad_line: bool
) -> None:
    # a block with a bad line is parsed line by line: that path must read the BOM line alike
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"id": 0}\n{"id": 1}\n' + (b"{oops\n" if bad_line else b""))
    ds = StreamingDataset(str(path), shuffle=False, on_error="skip", rank=0, world_size=1)
    assert [r["id"] for r in ds] == [0, 1] and ds.quarantine.count == int(bad_line)


@given(st.binary(max_size=60).map(lambda b: bytes(b"ab \t\r\n{}"[x % 8] for x in b)))
def test_record_count_follows_the_rule_for_any_piece(piece: bytes) -> None:
    """A record is a line holding anything but spaces, tabs and ``\\r`` (module rule)."""
    from shardwise.formats.jsonl._lines import count_records

    lines = piece.split(b"\n")
    if piece.endswith(b"\n") or not piece:
        lines = lines[:-1]
    records = sum(1 for line in lines if line.strip(b" \t\r"))
    assert count_records(piece) == (records, len(lines))


def test_values_fit_a_type_as_arrows_reader_takes_them() -> None:
    from shardwise.formats.jsonl._fits import misfit

    fits = [(1, pa.float64()), (2.5, pa.float32()), (True, pa.bool_()), (None, pa.int8())]
    fits += [
        ([1, None], pa.list_(pa.int64())),
        ({"a": 1, "z": "x"}, pa.struct([("a", pa.int64())])),
    ]
    misfits = [(True, pa.float64()), (1, pa.bool_()), (12.0, pa.int64()), ("1", pa.int32())]
    misfits += [([1, 2.5], pa.list_(pa.int64())), ({"a": "x"}, pa.struct([("a", pa.int64())]))]
    misfits += [
        (5, pa.string()),
        ("x", pa.list_(pa.string())),
        ([1], pa.struct([("a", pa.int8())])),
    ]
    assert [misfit(v, t) for v, t in fits] == [None] * len(fits)
    assert all(misfit(v, t) for v, t in misfits)
