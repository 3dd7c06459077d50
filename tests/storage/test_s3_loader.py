"""Streaming from S3 equals streaming from local disk: the same dataset in every format,
uploaded to a real SeaweedFS server, read through a 2-worker DataLoader (per sample and in
numpy batches) gives the local copy's samples in the same order."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from shardwise import StreamingDataset
from shardwise.formats import get_format

pytestmark = pytest.mark.engine


ROWS = 1_200


def _table(fmt: str) -> pa.Table:
    ids = np.arange(ROWS, dtype=np.int64)
    cols: dict[str, Any] = {
        "id": ids,
        "text": [f"doc {i} ünï ✓" for i in ids],
        "vec": pa.array([[float(i), -float(i)] for i in ids], pa.list_(pa.float32())),
    }
    if fmt == "webdataset":
        return pa.table(
            {
                "__key__": [f"s{i:05d}" for i in ids],
                "txt": cols["text"],
                "cls": pa.array([str(i) for i in ids]),
            }
        )
    return pa.table(cols)


def _write_local(root: Path, fmt: str) -> None:
    writer = get_format(fmt).open_writer(str(root / "part"), target_shard_bytes=6_000)
    for batch in _table(fmt).to_batches(max_chunksize=97):
        writer.write(batch)
    writer.close()


def _epoch(ds: StreamingDataset, per_sample: bool) -> list[str]:
    from torch.utils.data import DataLoader

    key = "__key__" if "__key__" in ds.index.schema.names else "id"
    loader = DataLoader(ds, batch_size=8 if per_sample else None, num_workers=2)
    out: list[str] = []
    for batch in loader:
        out.extend(str(v) for v in np.asarray(batch[key]).tolist())
    return out


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "webdataset"])
def test_streaming_from_s3_equals_local_disk(
    fmt: str,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path / "cache"))
    name, fs = bucket
    local = tmp_path / "local"
    local.mkdir()
    _write_local(local, fmt)
    files = sorted(p for p in local.iterdir() if not p.name.startswith(("_", ".")))
    assert len(files) >= 2  # several shards, so the two workers get different files
    for p in files:
        fs.put(str(p), f"{name}/ds/{p.name}")
    opts = s3_server["storage_options"]
    for per_sample in (True, False):
        common: dict[str, Any] = dict(
            batch_size=8,
            seed=5,
            num_workers=2,
            format=fmt,
            batch_format=None if per_sample else "numpy",
        )
        if fmt == "jsonl":
            common["unit_bytes"] = 4_000  # byte-range units inside each file
        want = _epoch(StreamingDataset(str(local), **common), per_sample)
        got = _epoch(
            StreamingDataset(f"s3://{name}/ds", storage_options=opts, **common), per_sample
        )
        assert len(want) == len(set(want)) > ROWS * 0.9
        assert got == want


@pytest.mark.parametrize("cache", [True, False])
def test_a_file_changed_on_s3_after_indexing_is_refused_not_read(
    cache: bool,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same size, other bytes: with the node cache the reader's own download (not only
    the downloads ahead) asks for the indexed ETag; without it each unit read checks it."""
    from shardwise import StorageError

    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path / "index"))
    name, fs = bucket
    lines = [f'{{"id": {100_000 + i}}}\n' for i in range(500)]
    for part in range(2):
        fs.pipe(
            f"{name}/chg/part-{part}.jsonl",
            "".join(lines).replace('"id": 1', f'"id": {part + 1}').encode(),
        )
    kw: dict[str, Any] = dict(batch_size=10, seed=1, storage_options=s3_server["storage_options"])
    if cache:
        kw.update(cache_dir=str(tmp_path / "node"), cache_bytes=2**28)
    ds = StreamingDataset(f"s3://{name}/chg", **kw)
    fs.pipe(f"{name}/chg/part-0.jsonl", "".join(lines).replace('"id": 1', '"id": 9').encode())
    with pytest.raises(StorageError, match="part-0.jsonl changed since it was indexed"):
        for _ in ds:
            pass
