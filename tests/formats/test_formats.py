"""Formats layer: shard writers and readers for Parquet, JSONL and WebDataset.

Covers round trips through each format's own rolling writer, size rollover and
byte-for-byte determinism, line-aligned JSONL ranges (property-based), compressed
JSONL, bad-record errors and quarantine, truncated files, unsafe tar members and
WebDataset sample grouping. Index-level behaviour is in test_index.py.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import FormatError, UnsafeMemberError
from shardwise.formats import Quarantine, Unit, WrittenFile, detect_format, get_format
from shardwise.formats.jsonl import JsonlFormat
from shardwise.index import open_dataset

# Values chosen to trip encoders: multi-byte UTF-8, escapes, empty strings, nulls.
TEXTS = ["héllo wörld", "日本語テキスト", "emoji 🚀🎉", "", 'quote " back\\slash', "tab\tnew\nline", None]


def _table(n: int, start: int = 0) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "text": pa.array([TEXTS[i % len(TEXTS)] for i in ids], pa.string()),
            "score": pa.array([None if i % 5 == 0 else i * 0.5 for i in ids], pa.float64()),
            "flag": pa.array([None if i % 3 == 0 else i % 2 == 0 for i in ids], pa.bool_()),
        }
    )


def _wds_table(n: int, start: int = 0) -> pa.Table:
    keys = [f"{i:05d}" for i in range(start, start + n)]
    return pa.table(
        {
            "__key__": pa.array(keys, pa.string()),
            # binary with NUL and high bytes; every 4th sample has an empty payload
            "bin": pa.array([bytes([i % 256, 0, 255, 10]) * (i % 4) for i in range(start, start + n)], pa.binary()),
            # unicode text; every 3rd sample lacks it (no member written)
            "txt": pa.array([None if i % 3 == 0 else f"sample {i} ✓ ünï" for i in range(start, start + n)], pa.string()),
        }
    )


def _write(name: str, prefix: str, table: pa.Table, batch_rows: int, **options: Any) -> list[WrittenFile]:
    writer = get_format(name).open_writer(prefix, **options)
    for batch in table.to_batches(max_chunksize=batch_rows):
        writer.write(batch)
    return writer.close()


def _units(name: str, files: Sequence[str], **fmt_options: Any) -> list[Unit]:
    fmt = get_format(name, **fmt_options) if fmt_options else get_format(name)
    return [u for f in files for u in fmt.list_units(f, os.path.getsize(f))]


def _read(name: str, files: Sequence[str], **fmt_options: Any) -> pa.Table:
    """Read every unit of ``files`` with a schema unified over all files."""
    fmt = get_format(name, **fmt_options) if fmt_options else get_format(name)
    schema = pa.unify_schemas([fmt.read_schema(f) for f in files], promote_options="permissive")
    batches = []
    for unit in _units(name, files, **fmt_options):
        got = list(fmt.read_unit(unit, schema=schema))
        assert sum(b.num_rows for b in got) == unit.num_samples, unit
        batches.extend(got)
    return pa.Table.from_batches(batches, schema=schema)


def _check_written(files: list[WrittenFile]) -> None:
    for wf in files:
        data = Path(wf.path).read_bytes()
        assert wf.num_bytes == len(data)
        assert wf.checksum == xxhash.xxh64(data).hexdigest()


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize(
    "name,options",
    [
        ("parquet", {"row_group_rows": 64}),
        ("parquet", {"row_group_rows": 1000, "compression": "snappy"}),
        ("jsonl", {}),
        ("jsonl", {"compression": "gzip"}),
        ("jsonl", {"compression": "zstd"}),
    ],
    ids=["parquet-zstd", "parquet-snappy", "jsonl", "jsonl-gz", "jsonl-zst"],
)
def test_tabular_round_trip(tmp_path: Path, name: str, options: dict[str, Any]) -> None:
    table = _table(300)
    written = _write(name, str(tmp_path / "part"), table, batch_rows=70, **options)
    _check_written(written)
    assert sum(w.num_rows for w in written) == 300
    paths = [w.path for w in written]
    assert all(detect_format(p) == name for p in paths)
    back = _read(name, paths)
    assert back.num_rows == 300
    assert back.select(table.column_names).to_pylist() == table.to_pylist()


def test_parquet_round_trip_keeps_types_and_row_groups(tmp_path: Path) -> None:
    table = _table(250)
    written = _write("parquet", str(tmp_path / "p"), table, batch_rows=30, row_group_rows=100)
    assert len(written) == 1
    units = _units("parquet", [written[0].path])
    assert [u.num_samples for u in units] == [100, 100, 50]
    assert [u.index for u in units] == [0, 1, 2]
    assert get_format("parquet").read_schema(written[0].path) == table.schema
    # column projection returns only the asked columns, in the unit's rows
    fmt = get_format("parquet")
    got = [b for b in fmt.read_unit(units[1], columns=["text", "id"])]
    proj = pa.Table.from_batches(got)
    assert proj.column_names == ["text", "id"]
    assert proj.column("id").to_pylist() == list(range(100, 200))


def test_jsonl_round_trip_binary_becomes_base64(tmp_path: Path) -> None:
    table = pa.table({"k": ["a", "b"], "blob": pa.array([b"\x00\xff\x10", None], pa.binary())})
    written = _write("jsonl", str(tmp_path / "j"), table, batch_rows=10)
    lines = Path(written[0].path).read_text(encoding="utf-8").splitlines()
    assert [json.loads(x) for x in lines] == [{"k": "a", "blob": "AP8Q"}, {"k": "b", "blob": None}]


def test_jsonl_writer_keeps_unicode_unescaped(tmp_path: Path) -> None:
    table = pa.table({"t": ["日本語", "🚀"]})
    written = _write("jsonl", str(tmp_path / "u"), table, batch_rows=10)
    raw = Path(written[0].path).read_bytes()
    assert raw == '{"t":"日本語"}\n{"t":"🚀"}\n'.encode()


def test_webdataset_round_trip(tmp_path: Path) -> None:
    table = _wds_table(40)
    written = _write("webdataset", str(tmp_path / "shard"), table, batch_rows=7)
    _check_written(written)
    paths = [w.path for w in written]
    back = _read("webdataset", paths)
    assert back.schema.names == ["__key__", "bin", "txt"]
    assert back.schema.field("bin").type == pa.binary() and back.schema.field("txt").type == pa.binary()
    expected = [
        {"__key__": r["__key__"], "bin": r["bin"], "txt": None if r["txt"] is None else r["txt"].encode("utf-8")}
        for r in table.to_pylist()
    ]
    assert back.to_pylist() == expected
    # empty payloads survive as b"" (a member of size 0), not as null
    assert back.column("bin")[0].as_py() == b""


def test_webdataset_writer_encodes_numbers_and_structs_as_json(tmp_path: Path) -> None:
    table = pa.table(
        {
            "__key__": ["k1", "k2"],
            "cls": pa.array([3, None], pa.int64()),
            "meta": pa.array([{"a": 1, "s": "ü"}, {"a": 2, "s": "x"}]),
        }
    )
    written = _write("webdataset", str(tmp_path / "w"), table, batch_rows=2)
    with tarfile.open(written[0].path) as tf:
        names = tf.getnames()
        assert names == ["k1.cls", "k1.meta", "k2.meta"]
        assert tf.extractfile("k1.cls").read() == b"3"  # type: ignore[union-attr]
        assert json.loads(tf.extractfile("k1.meta").read()) == {"a": 1, "s": "ü"}  # type: ignore[union-attr]
        info = tf.getmember("k1.cls")
        assert (info.mtime, info.uid, info.gid, info.uname, info.mode) == (0, 0, 0, "", 0o644)


def test_webdataset_writer_rejects_a_sample_with_no_fields(tmp_path: Path) -> None:
    # a tar cannot hold an empty sample: the row would vanish while num_rows counted it
    writer = get_format("webdataset").open_writer(str(tmp_path / "w"))
    with pytest.raises(ValueError, match="'b'.*no non-null field"):
        writer.write(pa.record_batch({"__key__": ["a", "b"], "x": pa.array([b"1", None])}))


def test_webdataset_writer_needs_key_column(tmp_path: Path) -> None:
    writer = get_format("webdataset").open_writer(str(tmp_path / "w"))
    with pytest.raises(ValueError, match="__key__"):
        writer.write(pa.record_batch({"x": [b"a"]}))


# --------------------------------------------------------------------------- rollover & determinism


def _incompressible_table(n: int) -> pa.Table:
    # hex of distinct hashes: compresses poorly so encoded size tracks the row count
    return pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "payload": ["".join(xxhash.xxh128(f"{i}-{j}".encode()).hexdigest() for j in range(4)) for i in range(n)],
        }
    )


@pytest.mark.parametrize(
    "name,options,slack",
    [
        ("parquet", {"row_group_rows": 50}, 0.6),
        ("jsonl", {}, 0.25),
        ("jsonl", {"compression": "gzip"}, 0.25),
        ("webdataset", {}, 0.6),
    ],
    ids=["parquet", "jsonl", "jsonl-gz", "webdataset"],
)
def test_writer_rolls_over_at_target_size(tmp_path: Path, name: str, options: dict[str, Any], slack: float) -> None:
    target = 40_000
    n = 400 if name == "webdataset" else 2400
    table = _incompressible_table(n)
    if name == "webdataset":
        table = table.append_column("__key__", pa.array([f"{i:06d}" for i in range(n)]))
    written = _write(name, str(tmp_path / "out"), table, batch_rows=50, target_shard_bytes=target, **options)
    assert len(written) >= 4
    assert [os.path.basename(w.path).split(".")[0] for w in written] == [f"out-{i:05d}" for i in range(len(written))]
    assert sum(w.num_rows for w in written) == n
    _check_written(written)
    # the raw (uncompressed for JSONL) shard size stays near the target
    sizes = [w.num_bytes for w in written]
    if options.get("compression") == "gzip":
        import gzip

        sizes = [len(gzip.decompress(Path(w.path).read_bytes())) for w in written]
    assert max(sizes) <= target * (1 + slack), sizes
    # every shard but the last is reasonably full
    assert min(sizes[:-1]) >= target * 0.5, sizes
    # no temp files left behind, nothing but the shards
    assert sorted(os.listdir(tmp_path)) == sorted(os.path.basename(w.path) for w in written)
    # and they read back to the same rows
    back = _read(name, [w.path for w in written])
    if name == "webdataset":
        assert back.column("__key__").to_pylist() == [f"{i:06d}" for i in range(n)]
        assert back.column("id").to_pylist() == [str(i).encode() for i in range(n)]
    else:
        assert back.column("id").to_pylist() == list(range(n))


@pytest.mark.parametrize(
    "name,options",
    [
        ("parquet", {"row_group_rows": 40, "target_shard_bytes": 1500}),
        ("jsonl", {"target_shard_bytes": 4000}),
        ("jsonl", {"compression": "gzip", "target_shard_bytes": 4000}),
        ("jsonl", {"compression": "zstd", "target_shard_bytes": 4000}),
        ("webdataset", {"target_shard_bytes": 40_000}),
    ],
    ids=["parquet", "jsonl", "jsonl-gz", "jsonl-zst", "webdataset"],
)
def test_writers_are_deterministic(tmp_path: Path, name: str, options: dict[str, Any]) -> None:
    table = _wds_table(200) if name == "webdataset" else _table(200)
    first = _write(name, str(tmp_path / "a" / "s"), table, batch_rows=33, **options)
    second = _write(name, str(tmp_path / "b" / "s"), table, batch_rows=33, **options)
    assert len(first) == len(second) >= 2
    for x, y in zip(first, second):
        assert Path(x.path).read_bytes() == Path(y.path).read_bytes()
        assert (x.num_rows, x.num_bytes, x.checksum) == (y.num_rows, y.num_bytes, y.checksum)


def test_writer_without_rows_writes_nothing(tmp_path: Path) -> None:
    writer = get_format("jsonl").open_writer(str(tmp_path / "e"))
    writer.write(pa.record_batch({"a": pa.array([], pa.int64())}))
    assert writer.close() == []
    assert os.listdir(tmp_path) == []


def test_writer_aborted_in_with_block_commits_nothing_more(tmp_path: Path) -> None:
    fmt = get_format("jsonl")
    with pytest.raises(RuntimeError):
        with fmt.open_writer(str(tmp_path / "x"), target_shard_bytes=10**6) as writer:  # type: ignore[attr-defined]
            writer.write(pa.record_batch({"a": [1, 2]}))
            raise RuntimeError("boom")
    assert os.listdir(tmp_path) == []


# --------------------------------------------------------------------------- JSONL ranges

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
    lines: list[tuple[str, str]], trailing_newline: bool, crlf: bool, unit_bytes: int, block_bytes: int
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


def test_jsonl_many_units_cover_a_file(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(5000):
            f.write(json.dumps({"i": i, "t": "ü" * (i % 17)}, ensure_ascii=False) + "\n")
    fmt = JsonlFormat(unit_bytes=4096, block_bytes=1000)
    units = fmt.list_units(str(path), path.stat().st_size)
    assert len(units) > 20
    assert all(u.num_bytes <= 4096 + 60 for u in units)
    ids = [i for u in units for b in fmt.read_unit(u, columns=["i"]) for i in b.column("i").to_pylist()]
    assert ids == list(range(5000))


def test_jsonl_blank_lines_are_not_records(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_bytes(b'\n{"a":1}\n\n   \n{"a":2}\r\n\t\r\n \n{"a":3}\n\n')
    fmt = get_format("jsonl")
    units = fmt.list_units(str(path), path.stat().st_size)
    assert sum(u.num_samples for u in units) == 3
    rows = [r for u in units for b in fmt.read_unit(u) for r in b.to_pylist()]
    assert rows == [{"a": 1}, {"a": 2}, {"a": 3}]
    index = open_dataset(str(path), progress=False, cache_dir=str(tmp_path / "cache"))
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
    path.write_text('{"i": 1, "f": 0.5, "s": "x", "n": null}\n{"i": 2, "f": null, "s": null, "n": null}\n')
    schema = get_format("jsonl").read_schema(str(path))
    assert schema == pa.schema([("i", pa.int64()), ("f", pa.float64()), ("s", pa.string()), ("n", pa.string())])


@pytest.mark.parametrize("codec,suffix", [("gzip", ".jsonl.gz"), ("zstd", ".jsonl.zst")])
def test_compressed_jsonl_is_one_whole_file_unit(tmp_path: Path, codec: str, suffix: str) -> None:
    path = tmp_path / f"c{suffix}"
    rows = [{"i": i, "s": TEXTS[i % len(TEXTS)]} for i in range(3000)]
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
    assert (units[0].num_samples, units[0].start, units[0].end, units[0].num_bytes) == (3000, 0, size, size)
    got = [r for b in fmt.read_unit(units[0]) for r in b.to_pylist()]
    assert got == rows
    index = open_dataset(str(path), progress=False, cache_dir=str(tmp_path / "cache"))
    assert index.num_samples == 3000 and index.num_units == 1


def test_compressed_jsonl_error_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl.gz"
    with pa.OSFile(str(path), "wb") as raw, pa.CompressedOutputStream(raw, "gzip") as out:
        out.write(b'{"a":1}\n{"a":2}\n\n{"a":\n{"a":5}\n')
    fmt = get_format("jsonl")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    with pytest.raises(FormatError) as err:
        list(fmt.read_unit(unit))
    assert str(path) in str(err.value) and "line 4" in str(err.value)


# --------------------------------------------------------------------------- JSONL bad records


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
    rows = [r for u in units for b in fmt.read_unit(u, schema=schema, on_error="skip", quarantine=q) for r in b.to_pylist()]
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
    ids = [r["i"] for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for r in b.to_pylist()]
    assert ids == list(range(0, 100, 2))
    assert q.count == 50 and len(q.examples) == 5
    assert [e[1] for e in q.examples] == ["line 2", "line 4", "line 6", "line 8", "line 10"]
    total = Quarantine(max_examples=7)
    total.merge(q)
    total.merge(q)
    assert total.count == 100 and len(total.examples) == 7


# --------------------------------------------------------------------------- Parquet bad files


@pytest.mark.parametrize("cut", [1, 8, 300])
def test_truncated_parquet_is_a_format_error(tmp_path: Path, cut: int) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    pq.write_table(_table(500), root / "good.parquet", row_group_size=100)
    data = (root / "good.parquet").read_bytes()
    (root / "bad.parquet").write_bytes(data[:-cut])
    with pytest.raises(FormatError) as err:
        open_dataset(str(root), progress=False, cache_dir=str(tmp_path / "cache"))
    assert str(root / "bad.parquet") in str(err.value)
    assert "good.parquet" not in str(err.value)


def test_parquet_that_is_not_parquet(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(FormatError, match="x.parquet"):
        get_format("parquet").list_units(str(path), path.stat().st_size)


def test_parquet_corrupt_row_group_is_named_and_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(_incompressible_table(300), path, row_group_size=100, compression="snappy")
    fmt = get_format("parquet")
    units = fmt.list_units(str(path), path.stat().st_size)
    md = pq.ParquetFile(path).metadata
    col = md.row_group(1).column(1)
    start = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(path.read_bytes())
    data[start : start + col.total_compressed_size] = b"\xa5" * col.total_compressed_size
    path.write_bytes(bytes(data))
    assert [u.num_samples for u in fmt.list_units(str(path), len(data))] == [100, 100, 100]  # footer intact
    assert sum(b.num_rows for b in fmt.read_unit(units[0])) == 100
    with pytest.raises(FormatError) as err:
        list(fmt.read_unit(units[1]))
    assert str(path) in str(err.value) and "row group 1" in str(err.value)
    q = Quarantine()
    assert list(fmt.read_unit(units[1], on_error="skip", quarantine=q)) == []
    assert q.count == 100 and q.examples[0][1] == "row group 1"


def test_parquet_read_unit_conforms_to_dataset_schema(tmp_path: Path) -> None:
    path = tmp_path / "narrow.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32())}), path)
    fmt = get_format("parquet")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    wide = pa.schema([("id", pa.int64()), ("extra", pa.string())])
    (batch,) = list(fmt.read_unit(unit, schema=wide))
    assert batch.schema == wide
    assert batch.to_pylist() == [{"id": 1, "extra": None}, {"id": 2, "extra": None}]


# --------------------------------------------------------------------------- WebDataset tars


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                name, payload = m
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    return path


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


UNSAFE = {
    "dotdot": (("../evil.txt", b"pwned"), "'..'"),
    "dotdot-nested": (("a/../../evil.txt", b"pwned"), "'..'"),
    "absolute": (("/etc/x", b"root"), "absolute"),
    "symlink": (_special("0002.lnk", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    "hardlink": (_special("0002.hard", tarfile.LNKTYPE, "0001.txt"), "hard link"),
    "chardev": (_special("0002.dev", tarfile.CHRTYPE), "device"),
    "blockdev": (_special("0002.blk", tarfile.BLKTYPE), "device"),
    "fifo": (_special("0002.pipe", tarfile.FIFOTYPE), "FIFO"),
}


@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_unsafe_tar_member_raises_naming_tar_and_member(tmp_path: Path, kind: str) -> None:
    bad, reason = UNSAFE[kind]
    name = bad.name if isinstance(bad, tarfile.TarInfo) else bad[0]
    path = _tar(tmp_path / f"{kind}.tar", [("0001.txt", b"one"), bad, ("0003.txt", b"three")])
    fmt = get_format("webdataset")
    with pytest.raises(UnsafeMemberError) as at_index:  # refused while indexing already
        fmt.list_units(str(path), path.stat().st_size)
    assert f"member {name}" in str(at_index.value)
    (unit,) = get_format("webdataset", on_error="skip").list_units(str(path), path.stat().st_size)
    assert unit.num_samples == 2  # counted as reading will yield them
    with pytest.raises(UnsafeMemberError) as err:
        list(fmt.read_unit(unit))
    msg = str(err.value)
    assert str(path) in msg and f"member {name}" in msg and reason in msg
    assert err.value.path == str(path)
    # under skip the sample is quarantined and counted, the others are kept
    q = Quarantine()
    keys = [k for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for k in b.column("__key__").to_pylist()]
    assert keys == ["0001", "0003"]
    assert q.count == 1 and q.examples[0][:2] == (str(path), f"member {name}")


def test_unsafe_member_never_touches_the_filesystem(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = _tar(work / "x.tar", [("../escaped.txt", b"pwned")])
    fmt = get_format("webdataset")
    with pytest.raises(UnsafeMemberError):
        fmt.list_units(str(path), path.stat().st_size)
    (unit,) = get_format("webdataset", on_error="skip").list_units(str(path), path.stat().st_size)
    with pytest.raises(UnsafeMemberError):
        list(fmt.read_unit(unit))
    assert not (tmp_path / "escaped.txt").exists()


def test_repeated_field_in_a_sample_is_a_format_error(tmp_path: Path) -> None:
    path = _tar(tmp_path / "dup.tar", [("0001.txt", b"a"), ("0001.txt", b"b")])
    fmt = get_format("webdataset")
    with pytest.raises(FormatError, match="appears twice"):
        fmt.list_units(str(path), path.stat().st_size)
    (unit,) = get_format("webdataset", on_error="skip").list_units(str(path), path.stat().st_size)
    with pytest.raises(FormatError) as err:
        list(fmt.read_unit(unit))
    assert not isinstance(err.value, UnsafeMemberError)
    assert "appears twice" in str(err.value) and str(path) in str(err.value)


def _three_sample_tar(tmp_path: Path) -> tuple[Path, bytes]:
    members = [(f"{k:04d}.{ext}", bytes([k]) * 700) for k in range(3) for ext in ("jpg", "json")]
    path = _tar(tmp_path / "full.tar", members)  # type: ignore[arg-type]
    return path, path.read_bytes()


# each member is a 512-byte header plus 1024 bytes of (padded) data
@pytest.mark.parametrize(
    "cut",
    [100, 512 + 300, 1536 * 2 + 200, 1536 * 3, 1536 * 5 + 700, 1536 * 6],
    ids=["in-first-header", "in-first-data", "in-later-header", "at-header-boundary", "in-last-data", "no-end-marker"],
)
def test_truncated_tar_is_a_format_error(tmp_path: Path, cut: int) -> None:
    full, data = _three_sample_tar(tmp_path)
    assert len(data) > 1536 * 6  # the end-of-archive blocks follow the members
    path = tmp_path / "cut.tar"
    path.write_bytes(data[:cut])
    fmt = get_format("webdataset")
    with pytest.raises(FormatError) as err:
        units = fmt.list_units(str(path), cut)
        for u in units:
            list(fmt.read_unit(u))
    assert str(path) in str(err.value)
    assert not isinstance(err.value, UnsafeMemberError)
    # the intact file is fine
    (unit,) = fmt.list_units(str(full), len(data))
    assert unit.num_samples == 3


def test_tar_with_garbage_after_members_is_a_format_error(tmp_path: Path) -> None:
    full, data = _three_sample_tar(tmp_path)
    path = tmp_path / "junk.tar"
    path.write_bytes(data[: 1536 * 6] + b"\x01garbage" + b"\0" * 2048)
    with pytest.raises(FormatError, match="junk.tar"):
        get_format("webdataset").list_units(str(path), path.stat().st_size)


def test_empty_or_non_tar_file_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "nothing.tar"
    path.write_bytes(b"")
    with pytest.raises(FormatError, match="nothing.tar"):
        get_format("webdataset").list_units(str(path), 0)
    path.write_bytes(b"this is plainly not a tar archive" * 40)
    with pytest.raises(FormatError, match="nothing.tar"):
        get_format("webdataset").list_units(str(path), path.stat().st_size)


def test_samples_grouped_by_key(tmp_path: Path) -> None:
    path = _tar(
        tmp_path / "g.tar",
        [
            _special("imgs", tarfile.DIRTYPE),  # directories are ignored
            ("0001.jpg", b"\xff\xd8jpeg-1"),
            ("0001.json", b'{"label": 1}'),
            ("0002.jpg", b"\xff\xd8jpeg-2"),
            ("0003.json", b'{"label": 3}'),
            ("0003.jpg", b"\xff\xd8jpeg-3"),
            ("0004.seg.png", b"png-4"),  # key ends at the first dot of the basename
            ("0004.jpg", b"jpeg-4"),
            ("imgs/v1.2/0005.jpg", b"jpeg-5"),  # dots in directories do not split the key
        ],
    )
    fmt = get_format("webdataset", batch_rows=2)
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    assert unit.num_samples == 5
    assert fmt.read_schema(str(path)).names == ["__key__", "jpg", "json", "seg.png"]
    batches = list(fmt.read_unit(unit))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    rows = pa.Table.from_batches(batches).to_pylist()
    assert rows == [
        {"__key__": "0001", "jpg": b"\xff\xd8jpeg-1", "json": b'{"label": 1}', "seg.png": None},
        {"__key__": "0002", "jpg": b"\xff\xd8jpeg-2", "json": None, "seg.png": None},
        {"__key__": "0003", "jpg": b"\xff\xd8jpeg-3", "json": b'{"label": 3}', "seg.png": None},
        {"__key__": "0004", "jpg": b"jpeg-4", "json": None, "seg.png": b"png-4"},
        {"__key__": "imgs/v1.2/0005", "jpg": b"jpeg-5", "json": None, "seg.png": None},
    ]
    # column projection keeps the key first
    proj = [r for b in fmt.read_unit(unit, columns=["json"]) for r in b.to_pylist()]
    assert proj[0] == {"__key__": "0001", "json": b'{"label": 1}'}
    with pytest.raises(ValueError, match="unknown columns"):
        list(fmt.read_unit(unit, columns=["nope"]))


def test_key_that_comes_back_is_a_bad_sample_naming_the_key(tmp_path: Path) -> None:
    path = _tar(tmp_path / "r.tar", [("a.jpg", b"1"), ("b.jpg", b"2"), ("a.json", b"3")])
    with pytest.raises(FormatError, match="'a' has members that are not adjacent"):
        get_format("webdataset").list_units(str(path), path.stat().st_size)
    fmt = get_format("webdataset", on_error="skip")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    q = Quarantine()
    keys = [k for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for k in b.column("__key__").to_pylist()]
    assert unit.num_samples == 2 and keys == ["a", "b"] and q.count == 1


# --------------------------------------------------------------------------- registry


def test_registry_names_aliases_and_errors() -> None:
    assert get_format("PQ").name == "parquet"
    assert get_format("ndjson").name == "jsonl"
    assert get_format("tar").name == "webdataset"
    assert get_format("jsonl") is get_format("json")
    assert get_format("jsonl", unit_bytes=10) is not get_format("jsonl")
    with pytest.raises(FormatError, match="known formats: jsonl, parquet, webdataset"):
        get_format("csv")
    assert detect_format("s3://b/x.NDJSON.zst") == "jsonl"
    with pytest.raises(FormatError, match="pass format="):
        detect_format("x.csv")
