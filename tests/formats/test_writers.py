"""The writer contract every format shares (formats/_writer.py and each format's writer):
round trips through the writer and back, size rollover, byte-for-byte determinism,
empty and aborted writers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import _formatdata as fd
import pyarrow as pa
import pytest

from shardwise.formats import detect_format, get_format

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
    table = fd.table(300)
    written = fd.write(name, str(tmp_path / "part"), table, batch_rows=70, **options)
    fd.check_written(written)
    assert sum(w.num_rows for w in written) == 300
    paths = [w.path for w in written]
    assert all(detect_format(p) == name for p in paths)
    back = fd.read(name, paths)
    assert back.num_rows == 300
    assert back.select(table.column_names).to_pylist() == table.to_pylist()


@pytest.mark.parametrize(
    "name,options",
    [
        ("parquet", {"row_group_rows": 100}),
        ("jsonl", {}),
        ("jsonl", {"compression": "gzip"}),
        ("jsonl", {"compression": "zstd"}),
    ],
)
def test_tabular_round_trip_through_the_index(tmp_path: Path, name: str, options: dict) -> None:
    writer = get_format(name).open_writer(
        str(tmp_path / "part"), target_shard_bytes=3_000, **options
    )
    for k in range(5):
        writer.write(fd.batch(300, k * 300))
    files = writer.close()
    assert len(files) > 2, "target size must roll over into several shards"
    assert sum(f.num_rows for f in files) == 1500
    assert all(os.path.getsize(f.path) == f.num_bytes for f in files)
    table = fd.read_everything(str(tmp_path))
    expected = pa.Table.from_batches([fd.batch(300, k * 300) for k in range(5)])
    assert table.sort_by("id").select(["id", "text", "score"]).to_pylist() == expected.to_pylist()


# --------------------------------------------------------------------------- rollover & determinism


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
def test_writer_rolls_over_at_target_size(
    tmp_path: Path, name: str, options: dict[str, Any], slack: float
) -> None:
    target = 40_000
    n = 400 if name == "webdataset" else 2400
    table = fd.incompressible_table(n)
    if name == "webdataset":
        table = table.append_column("__key__", pa.array([f"{i:06d}" for i in range(n)]))
    written = fd.write(
        name, str(tmp_path / "out"), table, batch_rows=50, target_shard_bytes=target, **options
    )
    assert len(written) >= 4
    assert [os.path.basename(w.path).split(".")[0] for w in written] == [
        f"out-{i:05d}" for i in range(len(written))
    ]
    assert sum(w.num_rows for w in written) == n
    fd.check_written(written)
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
    back = fd.read(name, [w.path for w in written])
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
    table = fd.wds_table(200) if name == "webdataset" else fd.table(200)
    first = fd.write(name, str(tmp_path / "a" / "s"), table, batch_rows=33, **options)
    second = fd.write(name, str(tmp_path / "b" / "s"), table, batch_rows=33, **options)
    assert len(first) == len(second) >= 2
    for x, y in zip(first, second):
        assert Path(x.path).read_bytes() == Path(y.path).read_bytes()
        assert (x.num_rows, x.num_bytes, x.checksum) == (y.num_rows, y.num_bytes, y.checksum)


@pytest.mark.parametrize("name", ["parquet", "jsonl", "webdataset"])
def test_writers_give_equal_bytes_for_equal_batches(tmp_path: Path, name: str) -> None:
    def write(dest: Path) -> list[bytes]:
        dest.mkdir()
        w = get_format(name).open_writer(str(dest / "s"), target_shard_bytes=3_000)
        for k in range(3):
            b = fd.batch(200, k * 200)
            if name == "webdataset":
                b = pa.record_batch(
                    {
                        "__key__": [f"{i:06d}" for i in b.column("id").to_pylist()],
                        "txt": b.column("text"),
                        "cls": b.column("id"),
                    }
                )
            w.write(b)
        return [Path(f.path).read_bytes() for f in w.close()]

    first, second = write(tmp_path / "a"), write(tmp_path / "b")
    assert len(first) > 1 and first == second


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


def test_parquet_refuses_rows_without_columns_that_jsonl_writes(tmp_path: Path) -> None:
    from shardwise.errors import UnsupportedError
    from shardwise.loader.batches.gather import fieldless_batch

    batch = fieldless_batch(3, pa.schema([]))
    writer = get_format("parquet").open_writer(str(tmp_path / "p"))
    with pytest.raises(UnsupportedError, match=r"p: 3 rows with no columns cannot be written"):
        writer.write(batch)
    jsonl = get_format("jsonl").open_writer(str(tmp_path / "j"))
    jsonl.write(batch)
    (written,) = jsonl.close()
    assert written.num_rows == 3 and Path(written.path).read_text() == "{}\n" * 3
