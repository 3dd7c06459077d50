"""A StreamingDataset in a plain DataLoader: ``len`` is the plan of the DataLoader's own
workers (Lightning and HF Trainer end an epoch there), and a batched dataset in a
DataLoader that batches (HF Trainer's) serves its rows, stacked into the same batches."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _loaderdata import make_parquet
from torch.utils.data import DataLoader

from shardwise import ConfigError, StreamingDataset

N = 397  # no batch size of the tests divides it


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("collating") / "ds", N)


def _ds(data: Path, **kw: Any) -> StreamingDataset:
    return StreamingDataset(str(data), batch_size=7, seed=3, rank=0, world_size=1, **kw)


@pytest.mark.parametrize("workers", [0, 1, 3])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("fmt", [None, "numpy"])
def test_a_dataloaders_len_is_its_workers_epoch(
    data: Path, workers: int, drop_last: bool, fmt: str | None
) -> None:
    """With a 1-worker length, 3 workers' epoch of 397 rows in batches of 7 has one batch
    more than ``len`` said, and a loop trusting ``len`` (Lightning) left its rows out."""
    ds = _ds(data, batch_format=fmt, drop_last=drop_last)
    loader = DataLoader(ds, batch_size=None if fmt else 7, num_workers=workers)
    batches = [b["id"].tolist() for b in loader]
    assert len(loader) == len(batches)
    seen = Counter(i for b in batches for i in b)
    if drop_last:
        assert max(seen.values()) == 1 and N - len(seen) < 7 * max(1, workers)
    else:
        assert set(seen) == set(range(N))


@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_a_batched_dataset_in_a_batching_dataloader_gives_its_own_batches(
    data: Path, workers: int, fmt: str
) -> None:
    whole = [
        b["id"].tolist()
        for b in DataLoader(_ds(data, batch_format=fmt), batch_size=None, num_workers=workers)
    ]
    loader = DataLoader(_ds(data, batch_format=fmt), batch_size=7, num_workers=workers)
    stacked = [b["id"].tolist() for b in loader]
    assert stacked == whole and len(loader) == len(whole)
    assert {len(b) for b in stacked} == {7}  # not a batch of batches


def test_a_batching_dataloader_of_another_batch_size_is_refused(data: Path) -> None:
    loader = DataLoader(_ds(data, batch_format="numpy"), batch_size=5)
    with pytest.raises(ConfigError, match="batch_size=None"):
        len(loader)
    with pytest.raises(ConfigError, match="not 5"):
        next(iter(loader))
    arrow = DataLoader(_ds(data, batch_format="arrow"), batch_size=7)
    with pytest.raises(ConfigError, match="batch_size=None"):
        next(iter(arrow))


def test_a_dataset_of_samples_in_batches_of_another_size_is_refused(data: Path) -> None:
    """Its state counts its own batches: a loop's steps of 8 samples given as
    ``consumed_batches`` of a dataset planned in 7s would resume elsewhere, silently."""
    loader = DataLoader(_ds(data), batch_size=8)
    with pytest.raises(ConfigError, match="give it batch_size=8"):
        len(loader)
    with pytest.raises(ConfigError, match="the DataLoader batch_size=7"):
        next(iter(loader))
    assert len(DataLoader(_ds(data), batch_size=7)) == N // 7  # drop_last: whole batches


@pytest.mark.parametrize("fmt", [None, "numpy"])
def test_another_batch_size_is_refused_in_dataloader_workers(data: Path, fmt: str | None) -> None:
    """In a worker no DataLoader is among the callers: the size of the fetcher's batches is
    checked at the first item. Before, 2 workers' batches of 8 went through unrefused, and
    a state's ``consumed_batches`` counted in them resumed the epoch elsewhere."""
    loader = DataLoader(_ds(data, batch_format=fmt, num_workers=2), batch_size=8, num_workers=2)
    with pytest.raises(ConfigError, match="batch_size=7"):
        next(iter(loader))
    same = DataLoader(_ds(data, batch_format=fmt, num_workers=2), batch_size=7, num_workers=2)
    assert {len(b["id"]) for b in same} == {7}
