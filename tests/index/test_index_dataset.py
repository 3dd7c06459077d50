"""index_dataset: counts equal a full read, persistence, invalidation, errors."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise import EmptyDatasetError, FormatError
from shardwise.formats import get_format
from shardwise.index import INDEX_NAME, DatasetIndex, index_dataset


def _parquet_dir(root: Path, sizes: list[list[int]]) -> Path:
    """One file per entry; each entry lists row-group sizes (uneven on purpose)."""
    root.mkdir(parents=True, exist_ok=True)
    start = 0
    for i, groups in enumerate(sizes):
        schema = pa.schema([("id", pa.int64()), ("text", pa.string())])
        with pq.ParquetWriter(root / f"part-{i:03d}.parquet", schema) as w:
            for n in groups:
                ids = list(range(start, start + n))
                w.write_table(pa.table({"id": ids, "text": [f"t{j}" for j in ids]}, schema=schema))
                start += n
    return root


def _read_all(index: DatasetIndex) -> list[int]:
    fmt = get_format(index.format)
    ids: list[int] = []
    for unit in index.units:
        n = 0
        for batch in fmt.read_unit(unit, columns=["id"], schema=index.schema):
            ids.extend(batch.column("id").to_pylist())
            n += batch.num_rows
        assert n == unit.num_samples
    return ids


def test_parquet_counts_equal_full_read(tmp_path: Path) -> None:
    root = _parquet_dir(tmp_path / "pq", [[5, 100, 1], [7], [33, 0, 2]])
    index = index_dataset(str(root))
    assert index.format == "parquet"
    assert index.num_samples == 148
    assert [u.num_samples for u in index.units] == [5, 100, 1, 7, 33, 0, 2]
    assert sorted(_read_all(index)) == list(range(148))
    assert index.schema.names == ["id", "text"]
    s = index.summary()
    assert s["smallest_unit"]["samples"] == 0 and s["largest_unit"]["samples"] == 100


def test_jsonl_counts_equal_full_read(tmp_path: Path) -> None:
    root = tmp_path / "js"
    root.mkdir()
    n = 0
    for i, rows in enumerate([3000, 1, 250]):
        with open(root / f"f{i}.jsonl", "w") as f:
            for _ in range(rows):
                f.write(json.dumps({"id": n, "text": "x" * (n % 50)}) + "\n")
                n += 1
    index = index_dataset(str(root), unit_bytes=16 * 1024)
    assert index.num_samples == n
    assert index.num_units > 3  # the big file was cut into byte ranges
    assert sorted(_read_all(index)) == list(range(n))


def test_webdataset_counts_equal_full_read(tmp_path: Path) -> None:
    root = tmp_path / "wds"
    root.mkdir()
    key = 0
    for shard, count in enumerate([4, 9]):
        with tarfile.open(root / f"shard-{shard}.tar", "w") as tf:
            for _ in range(count):
                for ext, payload in (
                    ("txt", f"sample {key}".encode()),
                    ("cls", str(key % 3).encode()),
                ):
                    ti = tarfile.TarInfo(f"{key:06d}.{ext}")
                    ti.size = len(payload)
                    tf.addfile(ti, io.BytesIO(payload))
                key += 1
    index = index_dataset(str(root / "*.tar"))
    assert index.format == "webdataset"
    assert [u.num_samples for u in index.units] == [4, 9]
    fmt = get_format("webdataset")
    keys = [
        k for u in index.units for b in fmt.read_unit(u) for k in b.column("__key__").to_pylist()
    ]
    assert keys == [f"{i:06d}" for i in range(13)]


def test_index_saved_beside_data_and_reused(tmp_path: Path) -> None:
    root = _parquet_dir(tmp_path / "pq", [[10, 10], [5]])
    first = index_dataset(str(root))
    assert first.location == str(root / INDEX_NAME)
    assert (root / INDEX_NAME).exists()
    again = index_dataset(str(root))
    assert again.reused_files == 2
    assert again.units == first.units


def test_index_rebuilt_when_a_file_changes(tmp_path: Path) -> None:
    root = _parquet_dir(tmp_path / "pq", [[10, 10], [5]])
    index_dataset(str(root))
    time.sleep(0.01)
    target = root / "part-001.parquet"
    pq.write_table(pa.table({"id": list(range(8)), "text": ["a"] * 8}), target, row_group_size=3)
    os.utime(target, (time.time() + 5, time.time() + 5))
    index = index_dataset(str(root))
    assert index.reused_files == 1
    assert index.num_samples == 28
    assert [u.num_samples for u in index.units] == [10, 10, 3, 3, 2]


def test_index_goes_to_cache_for_globs(tmp_path: Path) -> None:
    root = _parquet_dir(tmp_path / "pq", [[4], [6]])
    cache = tmp_path / "cache"
    index = index_dataset(str(root / "part-*.parquet"), cache_dir=str(cache))
    assert index.location.startswith(str(cache))
    assert not (root / INDEX_NAME).exists()
    assert index_dataset(str(root / "part-*.parquet"), cache_dir=str(cache)).reused_files == 2


def test_empty_glob_says_so(tmp_path: Path) -> None:
    with pytest.raises(EmptyDatasetError, match="no data files matched|no such file"):
        index_dataset(str(tmp_path / "nothing-*.parquet"))


def test_mixed_formats_need_a_choice(tmp_path: Path) -> None:
    _parquet_dir(tmp_path, [[3]])
    (tmp_path / "x.jsonl").write_text('{"a": 1}\n')
    with pytest.raises(FormatError, match="mix formats"):
        index_dataset(str(tmp_path))


def test_unknown_suffix_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "data.csv").write_text("a,b\n")
    with pytest.raises(FormatError, match="data.csv.*unknown format"):
        index_dataset(str(tmp_path / "data.csv"))


def test_index_json_round_trip(tmp_path: Path) -> None:
    index = index_dataset(str(_parquet_dir(tmp_path / "pq", [[2, 3]])))
    back = DatasetIndex.from_json(index.to_json())
    assert (
        back.units == index.units and back.files == index.files and back.schema.equals(index.schema)
    )


def test_a_committed_output_of_no_rows_says_so(tmp_path: Path) -> None:
    """A pipeline whose filters drop every row commits a manifest listing no file: reading
    it names the output and why it is empty, not a glob that matched nothing."""
    from shardwise import read_parquet

    src = _parquet_dir(tmp_path / "in", [[5]])
    out = tmp_path / "out"
    read_parquet(str(src)).filter(lambda b: [False] * len(b), reason="none").write_parquet(
        str(out)
    ).run()
    assert json.loads((out / "_manifest.json").read_text())["files"] == []
    with pytest.raises(EmptyDatasetError, match="committed output of 0 rows") as err:
        index_dataset(str(out))
    assert err.value.path == str(out)
