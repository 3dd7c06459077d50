"""Epochs advance by themselves: each new pass over a dataset is the next epoch unless
``set_epoch`` said otherwise, through a DataLoader with and without (persistent) workers;
a saved state names the epoch it describes, and a resumed epoch is followed by the next."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from shardwise.loader import StreamingDataset

ROWS = 600


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("epochs")
    for f, (a, b) in enumerate(((0, 250), (250, ROWS))):
        pq.write_table(pa.table({"id": np.arange(a, b)}), root / f"p{f}.parquet", row_group_size=70)
    return root


def _make(data: Path, mode: str | None, workers: int, persistent: bool) -> tuple[Any, Any]:
    ds = StreamingDataset(str(data), batch_size=10, seed=3, batch_format=mode, rank=0, world_size=1)
    dl = DataLoader(
        ds, batch_size=None if mode else 10, num_workers=workers, persistent_workers=persistent
    )
    return ds, dl


def _ids(batches: Any) -> list[int]:
    return [int(i) for b in batches for i in np.asarray(b["id"]).ravel()]


LOADERS = [(0, False), (2, False), (2, True)]


@pytest.mark.parametrize(("workers", "persistent"), LOADERS)
@pytest.mark.parametrize("mode", ["numpy", None])
def test_each_pass_is_the_next_epoch(
    data: Path, mode: str | None, workers: int, persistent: bool
) -> None:
    ds, dl = _make(data, mode, workers, persistent)
    passes = [_ids(dl) for _ in range(3)]
    ref, _ = _make(data, mode, workers, persistent)
    for e, ids in enumerate(passes):
        assert sorted(ids) == list(range(ROWS))  # every sample once in every epoch
        ref.set_epoch(e)
        assert ids == _ids(DataLoader(ref, batch_size=None if mode else 10, num_workers=workers))
    assert passes[0] != passes[1] != passes[2]
    assert ds.state_dict(consumed_batches=0)["epoch"] == 2  # the epoch the workers streamed
    assert ds.epoch == 2  # taken from the workers' reports


@pytest.mark.parametrize(("workers", "persistent"), LOADERS)
def test_an_explicit_set_epoch_wins(data: Path, workers: int, persistent: bool) -> None:
    ds, dl = _make(data, "numpy", workers, persistent)
    ds.set_epoch(5)
    first = _ids(dl)
    ds.set_epoch(5)
    assert _ids(dl) == first  # the same epoch again, as asked
    following = _ids(dl)  # no set_epoch: epoch 6
    ds.set_epoch(6)
    assert _ids(dl) == following != first


@pytest.mark.parametrize(("workers", "persistent"), LOADERS)
def test_a_resumed_epoch_is_followed_by_the_next(
    data: Path, workers: int, persistent: bool
) -> None:
    ds, dl = _make(data, "numpy", workers, persistent)
    epoch0, epoch1 = _ids(dl), _ids(dl)
    it = iter(dl)
    head = _ids([next(it) for _ in range(7)])  # epoch 2, 7 batches in
    state = ds.state_dict(consumed_batches=7)
    del it
    assert state["epoch"] == 2
    new, dl2 = _make(data, "numpy", workers, persistent)
    new.load_state_dict(state)
    tail = _ids(dl2)
    assert sorted(head + tail) == list(range(ROWS))  # the rest of epoch 2, exactly
    epoch3 = _ids(dl2)
    assert sorted(epoch3) == list(range(ROWS)) and epoch3 not in (epoch0, epoch1, head + tail)
    ref, _ = _make(data, "numpy", 0, False)
    ref.set_epoch(3)
    assert epoch3 == _ids(DataLoader(ref, batch_size=None, num_workers=workers))


def test_iter_shard_of_every_slot_is_one_pass(data: Path) -> None:
    """A JAX loop or DALI calls iter_shard once per (rank, worker) per epoch."""
    ds = StreamingDataset(str(data), batch_size=10, seed=3, batch_format="numpy")
    epochs = []
    for _ in range(2):
        ids = [_ids(ds.iter_shard(r, 2, w, 2)) for r in range(2) for w in range(2)]
        assert len({len(i) for i in ids}) == 1
        epochs.append(sorted(i for s in ids for i in s))
        assert len(epochs[-1]) == len(set(epochs[-1]))
    assert ds.epoch == 1 and epochs[0] == epochs[1]
