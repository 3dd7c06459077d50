"""Batches carry exactly the projected columns, by name, in the projection's order, in
every batch format and on both paths (in the training process and in DataLoader workers):
a WebDataset tar's reader adds its ``__key__`` column, which must not shift the names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from _daliwds import jpeg, make_shards
from _loaderdata import make_parquet
from torch.utils.data import DataLoader

from shardwise import StreamingDataset

FORMATS = [None, "numpy", "torch", "arrow"]


def _rows(batch: Any, fmt: str | None) -> list[dict[str, Any]]:
    """Per-row dicts of a batch (or of one sample), column names as the batch gives them."""
    if fmt is None:
        return [batch]
    if fmt == "arrow":
        return batch.to_pylist()
    cols = {
        k: (v.tolist() if isinstance(v, (np.ndarray, torch.Tensor)) else list(v))
        for k, v in batch.items()
    }
    n = len(next(iter(cols.values())))
    return [{k: v[i] for k, v in cols.items()} for i in range(n)]


def _epoch(ds: StreamingDataset, workers: int) -> list[dict[str, Any]]:
    if workers == 0:
        items = list(ds)
    else:
        loader = DataLoader(ds, batch_size=None, num_workers=workers)
        items = list(loader)
    out: list[dict[str, Any]] = []
    for item in items:
        out.extend(_rows(item, ds.batch_format))
    return out


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("columns", [["jpg", "cls"], ["cls", "jpg"], ["cls", "__key__"]])
def test_tar_columns_are_the_projection(
    tmp_path: Path, fmt: str | None, columns: list[str], workers: int
) -> None:
    n = make_shards(tmp_path / "shards", [9, 14, 5])
    ds = StreamingDataset(
        str(tmp_path / "shards"), batch_size=4, batch_format=fmt, columns=columns, seed=3
    )
    rows = _epoch(ds, workers)
    assert 0 < len(rows) == ds.plan(max(1, workers)).samples_per_rank <= n
    for row in rows:
        assert list(row) == columns
        i = int(bytes(row["cls"]).decode())
        if "jpg" in row:
            assert bytes(row["jpg"]) == jpeg(i)
        if "__key__" in row:
            key = row["__key__"]
            assert (key.decode() if isinstance(key, bytes) else key) == f"s{i:06d}"
    assert len({int(bytes(r["cls"]).decode()) for r in rows}) == len(rows)


@pytest.mark.parametrize("fmt", FORMATS)
def test_parquet_columns_in_the_projections_order(tmp_path: Path, fmt: str | None) -> None:
    make_parquet(tmp_path / "data", 203, files=3)
    ds = StreamingDataset(
        str(tmp_path / "data"), batch_size=8, batch_format=fmt, columns=["x", "id"], seed=1
    )
    rows = _epoch(ds, 0)
    assert rows and all(list(r) == ["x", "id"] for r in rows)
