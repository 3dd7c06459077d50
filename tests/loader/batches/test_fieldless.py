"""Records without fields (JSON lines ``{}``) are rows like any other: per sample each is
an empty dict, and batches hold as many rows as they promise, in every format, in the
training process and through DataLoader workers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from shardwise.loader import StreamingDataset

N = 8


def _dataset(tmp_path: Path, **kw: Any) -> StreamingDataset:
    (tmp_path / "a.jsonl").write_text("{}\n" * N)
    return StreamingDataset(str(tmp_path), shuffle=False, rank=0, world_size=1, **kw)


def _sizes(items: list[Any]) -> list[Any]:
    return [b.num_rows if isinstance(b, pa.RecordBatch) else b for b in items]


@pytest.mark.parametrize("workers", [None, 2])
def test_records_without_fields_are_empty_dicts_per_sample(tmp_path: Path, workers: Any) -> None:
    from torch.utils.data import DataLoader

    ds = _dataset(tmp_path)
    got = list(ds) if workers is None else list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(ds) == N and got == [{}] * N


@pytest.mark.parametrize("workers", [None, 2])
@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow"])
def test_batches_of_records_without_fields_keep_their_rows(
    tmp_path: Path, fmt: str, workers: Any
) -> None:
    from torch.utils.data import DataLoader

    ds = _dataset(tmp_path, batch_size=2, batch_format=fmt)
    got = list(ds) if workers is None else list(DataLoader(ds, batch_size=None, num_workers=2))
    assert len(got) == len(ds) == N // 2
    if fmt == "arrow":
        assert _sizes(got) == [2] * (N // 2) and all(b.num_columns == 0 for b in got)
    else:
        assert got == [{}] * (N // 2)
