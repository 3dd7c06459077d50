"""Formats: round trips, rollover and determinism, line-aligned ranges, compressed JSONL,
bad input errors (file and place named), quarantine, unsafe tar members."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise import FormatError, UnsafeMemberError, open_dataset
from shardwise.formats import Quarantine, get_format
from shardwise.formats.jsonl import JsonlFormat

TEXTS = ["plain", "ünïcödé ✓ 漢字", "", "quote \" and \\ backslash", "new\nline", None]


def _batch(n: int, offset: int = 0) -> pa.RecordBatch:
    ids = list(range(offset, offset + n))
    return pa.record_batch({
        "id": pa.array(ids, pa.int64()),
        "text": pa.array([TEXTS[i % len(TEXTS)] for i in ids], pa.string()),
        "score": pa.array([i / 4 if i % 7 else None for i in ids], pa.float64()),
    })


def _read_everything(path: str, **fmt_opts: object) -> pa.Table:
    index = open_dataset(path, progress=False, **fmt_opts)
    fmt = get_format(index.format)
    batches = [b for u in index.units for b in fmt.read_unit(u, schema=index.schema)]
    return pa.Table.from_batches(batches, schema=index.schema) if batches else index.schema.empty_table()


@pytest.mark.parametrize("name,options", [
    ("parquet", {"row_group_rows": 100}),
    ("jsonl", {}),
    ("jsonl", {"compression": "gzip"}),
    ("jsonl", {"compression": "zstd"}),
])
def test_tabular_round_trip(tmp_path: Path, name: str, options: dict) -> None:
    writer = get_format(name).open_writer(str(tmp_path / "part"), target_shard_bytes=3_000, **options)
    for k in range(5):
        writer.write(_batch(300, k * 300))
    files = writer.close()
    assert len(files) > 2, "target size must roll over into several shards"
    assert sum(f.num_rows for f in files) == 1500
    assert all(os.path.getsize(f.path) == f.num_bytes for f in files)
    table = _read_everything(str(tmp_path))
    expected = pa.Table.from_batches([_batch(300, k * 300) for k in range(5)])
    assert table.sort_by("id").select(["id", "text", "score"]).to_pylist() == expected.to_pylist()


def test_parquet_row_groups_are_units_and_projection(tmp_path: Path) -> None:
    w = get_format("parquet").open_writer(str(tmp_path / "p"), row_group_rows=64, target_shard_bytes=1 << 30)
    w.write(_batch(1000))
    [f] = w.close()
    assert pq.ParquetFile(f.path).metadata.num_row_groups == 16
    index = open_dataset(str(tmp_path), progress=False)
    assert [u.num_samples for u in index.units] == [64] * 15 + [40]
    batches = list(get_format("parquet").read_unit(index.units[3], columns=["id"], schema=index.schema))
    assert batches[0].schema.names == ["id"]
    assert batches[0].column(0).to_pylist()[:2] == [192, 193]


@pytest.mark.parametrize("name", ["parquet", "jsonl", "webdataset"])
def test_writers_are_deterministic(tmp_path: Path, name: str) -> None:
    def write(dest: Path) -> list[bytes]:
        dest.mkdir()
        w = get_format(name).open_writer(str(dest / "s"), target_shard_bytes=3_000)
        for k in range(3):
            b = _batch(200, k * 200)
            if name == "webdataset":
                b = pa.record_batch({"__key__": [f"{i:06d}" for i in b.column("id").to_pylist()],
                                     "txt": b.column("text"), "cls": b.column("id")})
            w.write(b)
        return [Path(f.path).read_bytes() for f in w.close()]

    first, second = write(tmp_path / "a"), write(tmp_path / "b")
    assert len(first) > 1 and first == second


def test_webdataset_round_trip_groups_by_key(tmp_path: Path) -> None:
    keys = [f"sample{i:04d}" for i in range(50)]
    jpgs = [os.urandom(100 + i) for i in range(50)]
    batch = pa.record_batch({
        "__key__": keys,
        "jpg": pa.array(jpgs, pa.binary()),
        "json": [json.dumps({"label": i}) for i in range(50)],
        "cls": pa.array([i % 3 for i in range(50)], pa.int64()),
    })
    w = get_format("webdataset").open_writer(str(tmp_path / "shard"), target_shard_bytes=3_000)
    w.write(batch)
    files = w.close()
    assert len(files) > 3
    with tarfile.open(files[0].path) as tf:
        names = tf.getnames()
    assert names[:3] == ["sample0000.jpg", "sample0000.json", "sample0000.cls"]
    table = _read_everything(str(tmp_path))
    assert table.num_rows == 50
    assert table.column("__key__").to_pylist() == keys
    assert table.column("jpg").to_pylist() == jpgs
    assert json.loads(table.column("json")[7].as_py()) == {"label": 7}
    assert table.column("cls")[5].as_py() == b"2"


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
def test_jsonl_byte_ranges_give_every_record_once(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], unit_bytes: int, block_bytes: int,
    blank_every: int, trailing_newline: bool,
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


def test_compressed_jsonl_is_one_streamed_unit(tmp_path: Path) -> None:
    rows = [json.dumps({"id": i, "text": f"row {i}"}).encode() + b"\n" for i in range(5000)]
    with gzip.open(tmp_path / "a.jsonl.gz", "wb") as f:
        f.writelines(rows)
    with pa.CompressedOutputStream(str(tmp_path / "b.jsonl.zst"), "zstd") as f:
        f.write(b"".join(rows))
    index = open_dataset(str(tmp_path), progress=False, block_bytes=4096)
    assert [u.num_samples for u in index.units] == [5000, 5000]
    assert sorted(_read_everything(str(tmp_path)).column("id").to_pylist()) == sorted(list(range(5000)) * 2)


def test_malformed_json_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    lines = [json.dumps({"id": i}).encode() + b"\n" for i in range(10)]
    lines[6] = b'{"id": 6, oops\n'
    _write_lines(path, lines)
    with pytest.raises(FormatError) as info:
        _read_everything(str(path))
    assert str(path) in str(info.value) and "line 7" in str(info.value)

    fmt = get_format("jsonl")
    q = Quarantine()
    [unit] = open_dataset(str(path), progress=False, refresh=True).units
    ids = [r["id"] for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for r in b.to_pylist()]
    assert ids == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    assert q.count == 1 and q.examples[0][0] == str(path) and "line 7" in q.examples[0][1]


def test_invalid_utf8_and_non_objects_are_bad_records(tmp_path: Path) -> None:
    path = tmp_path / "mixed.jsonl"
    _write_lines(path, [b'{"id": 0}\n', b'{"id": 1, "t": "\xff\xfe"}\n', b"[1, 2]\n", b"\n", b'{"id": 4}\n'])
    fmt = get_format("jsonl")
    unit = fmt.list_units(str(path), path.stat().st_size)[0]
    assert unit.num_samples == 4  # the blank line is not a record
    with pytest.raises(FormatError, match="line 2"):
        list(fmt.read_unit(unit, schema=pa.schema([("id", pa.int64()), ("t", pa.string())])))
    q = Quarantine()
    got = [r["id"] for b in fmt.read_unit(unit, on_error="skip", quarantine=q,
                                          schema=pa.schema([("id", pa.int64()), ("t", pa.string())]))
           for r in b.to_pylist()]
    assert got == [0, 4]
    assert q.count == 2
    assert [e[1] for e in q.examples] == ["line 2", "line 3"]


def test_truncated_parquet_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])
    with pytest.raises(FormatError) as info:
        open_dataset(str(path), progress=False)
    assert str(path) in str(info.value)


def _tar_with(path: Path, build: object) -> None:
    with tarfile.open(path, "w") as tf:
        ok = tarfile.TarInfo("0001.txt")
        ok.size = 2
        tf.addfile(ok, io.BytesIO(b"ok"))
        build(tf)  # type: ignore[operator]


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    return m


@pytest.mark.parametrize("member,reason", [
    (_member("../evil.txt"), ".."),
    (_member("a/../../evil.txt"), ".."),
    (_member("/etc/evil.txt"), "absolute"),
    (_member("0002.txt", tarfile.SYMTYPE, "/etc/passwd"), "link"),
    (_member("0002.txt", tarfile.LNKTYPE, "0001.txt"), "link"),
    (_member("0002.dev", tarfile.CHRTYPE), "device"),
    (_member("0002.fifo", tarfile.FIFOTYPE), "fifo"),
])
def test_unsafe_tar_members_are_rejected(tmp_path: Path, member: tarfile.TarInfo, reason: str) -> None:
    path = tmp_path / "shard.tar"

    def add(tf: tarfile.TarFile) -> None:
        if member.isreg():
            member.size = 4
            tf.addfile(member, io.BytesIO(b"evil"))
        else:
            tf.addfile(member)

    _tar_with(path, add)
    with pytest.raises(UnsafeMemberError) as info:
        _read_everything(str(path))
    msg = str(info.value)
    assert str(path) in msg and member.name in msg
    assert reason in msg.lower() or (reason == "device" and "special" in msg.lower())


def test_truncated_tar_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "cut.tar"
    with tarfile.open(path, "w") as tf:
        for i in range(5):
            m = tarfile.TarInfo(f"{i:04d}.bin")
            m.size = 5000
            tf.addfile(m, io.BytesIO(os.urandom(5000)))
    data = path.read_bytes()
    path.write_bytes(data[:12_000])
    with pytest.raises(FormatError) as info:
        _read_everything(str(path))
    assert str(path) in str(info.value)
