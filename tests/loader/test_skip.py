"""``on_error="skip"`` keeps plans exact: bad records are counted out before planning,
every readable record is streamed once, and what was left out is reported."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from shardwise.errors import FormatError
from shardwise.loader import StreamingDataset


def _jsonl(root: Path) -> tuple[Path, set[int]]:
    good = set()
    for f in range(3):
        lines = []
        for i in range(f * 100, f * 100 + 100):
            if i in (37, 205):
                lines.append(f'{{"id": {i}, "text": "cut')  # malformed
            else:
                lines.append(json.dumps({"id": i, "text": f"t{i}"}))
                good.add(i)
        (root / f"p{f}.jsonl").write_text("\n".join(lines) + "\n")
    return root, good


def _tar(root: Path) -> tuple[Path, set[int]]:
    good = set()
    for f in range(2):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
            for i in range(f * 50, f * 50 + 50):
                name = f"../s{i:04d}.id" if i == 61 else f"s{i:04d}.id"
                data = str(i).encode()
                info = tarfile.TarInfo(name)
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
                if i != 61:
                    good.add(i)
        (root / f"shard-{f}.tar").write_bytes(buf.getvalue())
    return root, good


def _parquet(root: Path) -> tuple[Path, set[int]]:
    rng = np.random.default_rng(0)
    n = 400
    texts = [rng.bytes(60).hex() for _ in range(n)]
    path = root / "d.parquet"
    pq.write_table(
        pa.table({"id": np.arange(n), "text": texts}),
        path,
        row_group_size=100,
        compression="snappy",
    )
    meta = pq.ParquetFile(path).metadata
    chunk = meta.row_group(2).column(1)
    start = chunk.data_page_offset + 40
    raw = bytearray(path.read_bytes())
    raw[start : start + 200] = rng.bytes(200)  # row group 2's text pages are garbage now
    path.write_bytes(bytes(raw))
    return path, set(range(0, 200)) | set(range(300, 400))


MAKERS = {"jsonl": _jsonl, "webdataset": _tar, "parquet": _parquet}


def _ids(x: dict[str, Any]) -> list[int]:
    v = x["id"]
    if isinstance(v, bytes):
        return [int(v)]
    if isinstance(v, list):
        return [int(e) for e in v]
    return [int(i) for i in np.asarray(v).ravel()]


@pytest.mark.parametrize("fmt", sorted(MAKERS))
def test_skip_streams_every_readable_record_once_with_exact_counts(
    fmt: str, tmp_path: Path
) -> None:
    path, good = MAKERS[fmt](tmp_path)
    with pytest.raises(FormatError):
        list(StreamingDataset(str(path), shuffle=False, rank=0, world_size=1))
    ds = StreamingDataset(str(path), batch_size=1, on_error="skip", rank=0, world_size=1)
    assert int(ds.counts.sum()) == len(good)
    # exactly what was left out, each place once: two lines, one tar member, one row group's
    # 100 rows
    expected = {
        "jsonl": (2, [("p0.jsonl", "line 38"), ("p2.jsonl", "line 6")]),
        "webdataset": (1, [("shard-1.tar", "member ../s0061.id")]),
        "parquet": (100, [("d.parquet", "row group 2")]),
    }[fmt]
    assert ds.quarantine.count == expected[0]
    assert sorted((Path(p).name, where) for p, where, _ in ds.quarantine.examples) == expected[1]
    assert all(str(tmp_path) in e[0] and e[2] for e in ds.quarantine.examples)
    got = [i for sample in ds for i in _ids(sample)]
    assert sorted(got) == sorted(good)
    # through a DataLoader with two workers, batched, every rank and worker equal
    ds = StreamingDataset(
        str(path),
        batch_size=5,
        on_error="skip",
        rank=0,
        world_size=1,
        batch_format=None if fmt == "webdataset" else "numpy",
        drop_last=False,
    )
    loader = DataLoader(ds, batch_size=5 if fmt == "webdataset" else None, num_workers=2)
    seen = [i for batch in loader for i in _ids(batch)]
    assert set(seen) == good  # nothing readable lost, nothing unreadable streamed
    assert len(seen) % 10 == 0 and len(seen) - len(good) < 10  # padding only to equal the workers


def test_an_empty_dataset_is_named_when_the_dataset_is_built(tmp_path: Path) -> None:
    import pyarrow.compute as pc

    from shardwise.errors import PlanError

    pq.write_table(pa.table({"id": pa.array([], pa.int64())}), tmp_path / "empty.parquet")
    with pytest.raises(PlanError, match="empty.parquet has no samples"):
        StreamingDataset(str(tmp_path), rank=0, world_size=1)
    pq.write_table(pa.table({"id": [1, 2, 3]}), tmp_path / "empty.parquet")
    with pytest.raises(PlanError, match="has no samples after filter="):
        StreamingDataset(
            str(tmp_path), rank=0, world_size=1, filter=pc.field("id") > 5, refresh=True
        )
