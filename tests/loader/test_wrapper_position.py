"""The position of a dataset served to accelerate's dispatcher (one process, DataLoader
workers): ``ds.state_dict(consumed_batches=k)`` counts the wrapper's steps, and
``continue_epoch`` continues from it on the same topology in the uninterrupted order and on
another (other DataLoader workers) with every sample not trained yet once. A plain
DataLoader pass after the wrapper's gets the ordinary state again. The dispatcher on 2
processes is tested in tests/integrations (the framework pages, resumed on 1 process)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest
import torch
from _loaderdata import make_parquet
from accelerate.data_loader import prepare_data_loader
from torch.utils.data import DataLoader

from shardwise.errors import ConfigError
from shardwise.integrations.loader import continue_epoch, epoch_position
from shardwise.loader import StreamingDataset

ROWS, B, TRAINED = 403, 10, 7


def _loader(data: Path, workers: int, fmt: str = "torch", ds: Any = None) -> Any:
    if ds is None:
        ds = StreamingDataset(str(data), batch_size=B, batch_format=fmt, seed=2, columns=["id"])
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    return prepare_data_loader(
        loader, torch.device("cpu"), put_on_device=True, dispatch_batches=True
    )


def _ids(batches: Any) -> list[list[int]]:
    return [b["id"].tolist() for b in batches]


def test_a_position_under_the_dispatcher_continues_on_any_topology(tmp_path: Path) -> None:
    data = make_parquet(tmp_path / "d", ROWS, files=3)
    first = _loader(data, 2)
    assert type(first).__name__ == "DataLoaderDispatcher"
    first.set_epoch(1)
    whole = _ids(first)
    first.set_epoch(1)
    _ids(itertools.islice(first, TRAINED))
    saved = first.dataset.state_dict(consumed_batches=TRAINED)
    assert saved["skip"] == TRAINED and saved["served"]["workers"] == 2

    same = _loader(data, 2)
    same.set_epoch(1)
    batches, done = continue_epoch(same, saved)
    assert done == TRAINED and _ids(batches) == whole[TRAINED:]  # the uninterrupted order

    other = _loader(data, 1)
    other.set_epoch(1)
    batches, done = continue_epoch(other, saved)
    rest = [i for b in _ids(batches) for i in b]
    before = [i for b in whole[:TRAINED] for i in b]
    assert done == 0 and not set(rest) & set(before) and len(rest) == len(set(rest))
    assert set(rest) <= {i for b in whole for i in b}
    assert len(whole) * B - len(before) - len(rest) < B  # 1 worker: less than a batch short


def test_a_plain_pass_after_the_wrappers_has_the_ordinary_state(tmp_path: Path) -> None:
    wrapped = _loader(make_parquet(tmp_path / "d", ROWS, files=3), 2)
    _ids(itertools.islice(wrapped, 3))
    assert "served" in wrapped.dataset.state_dict(consumed_batches=3)
    ds = wrapped.dataset
    plain = DataLoader(ds, batch_size=None, num_workers=2)
    _ids(itertools.islice(plain, 3))
    state = ds.state_dict(consumed_batches=3)
    assert "served" not in state and state["resumes"][0]["consumed_batches"] == 3


def test_continue_epoch_names_a_loader_of_another_dataset(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="continue_epoch takes a loader over a Streaming"):
        continue_epoch(DataLoader(list(range(5))), {})


def _counters(full: int, left: int, epoch: int, accum: int = 1, epochs: int = 3) -> Any:
    from types import SimpleNamespace

    from shardwise.loader.trainer_hooks import continued_counters

    args = SimpleNamespace(gradient_accumulation_steps=accum, max_steps=-1, num_train_epochs=epochs)
    trainer = SimpleNamespace(args=args, state=SimpleNamespace(global_step=100, max_steps=0))
    return (*continued_counters(trainer, epoch, left, full), trainer.state.max_steps)


def test_the_trainers_counters_continue_the_epochs_rest_and_keep_every_later_epoch() -> None:
    # 40 batches an epoch: in epoch 1 with 26 left, 14 are skipped; 26 steps of its rest
    # and epoch 2 whole (40) are left of 3 epochs
    assert _counters(40, 26, 1) == (1, 14, 100 + 26 + 40)
    assert _counters(40, 0, 1) == (2, 0, 100 + 40)  # epoch 1 done: epoch 2 whole
    assert _counters(40, 0, 0) == (1, 0, 100 + 80)  # at epoch 0's end: 2 epochs whole
    assert _counters(40, 40, 1) == (1, 0, 100 + 80)  # nothing of epoch 1 trained yet
    assert _counters(40, 0, 2) == (3, 0, 100)  # the last epoch done: nothing left
    # accumulation 3 over 40 batches (14 optimizer steps an epoch, the last of 1 batch):
    # 15 batches skipped (5 steps), the rest syncs at batches 18, 21, ..., 39 and at 40
    assert _counters(40, 25, 0, accum=3) == (0, 15, 100 + 9 + 2 * 14)


def test_a_loaders_position_keeps_its_epoch_after_an_evaluation_over_the_dataset(
    tmp_path: Path,
) -> None:
    """An evaluation through another prepared loader over the same dataset sets its own
    epoch (0) mid-pass; the training loader's position is still of its epoch (1), also
    after a resume that loaded a position (the evaluation drops it from the live state)."""
    data = make_parquet(tmp_path / "d", ROWS, files=3)
    train = _loader(data, 2)
    train.set_epoch(1)
    _ids(itertools.islice(train, TRAINED))
    quiet = epoch_position(train, TRAINED)
    _ids(_loader(data, 0, ds=train.dataset))  # the evaluation: epoch 0, a whole pass
    assert train.dataset.state.epoch == 0
    assert epoch_position(train, TRAINED) == quiet and quiet["epoch"] == 1

    other = _loader(data, 1)  # resumed on another topology, 5 more steps, an evaluation
    other.set_epoch(1)
    batches, _ = continue_epoch(other, quiet)
    _ids(itertools.islice(batches, 5))
    again = epoch_position(other, 5)
    _ids(_loader(data, 0, ds=other.dataset))
    assert epoch_position(other, 5) == again and len(again["resumes"]) == 2


def test_numpy_batches_reach_a_one_process_dispatcher_as_tensors(tmp_path: Path) -> None:
    """accelerate's dispatcher measures and broadcasts tensors only, on one process too."""
    loader = _loader(make_parquet(tmp_path / "d", ROWS, files=3), 2, fmt="numpy")
    batches = list(itertools.islice(loader, 3))
    assert all(isinstance(b["id"], torch.Tensor) and len(b["id"]) == B for b in batches)


def test_a_dataset_made_as_another_rank_than_it_streams_as_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Made before the process group (Lightning's DDP sets it up after the module exists),
    a dataset would stream as the rank it detected then: a ConfigError says so."""
    data = make_parquet(tmp_path / "d", ROWS, files=3)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    early = StreamingDataset(str(data), batch_size=B, seed=2, columns=["id"])
    given = StreamingDataset(str(data), batch_size=B, seed=2, columns=["id"], rank=1, world_size=2)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(ConfigError, match="made when this process was rank 1 of 2, and it is now"):
        next(iter(early))
    with pytest.raises(ConfigError, match="rank 0 of 1"):
        len(DataLoader(early, batch_size=B))
    assert len(next(iter(DataLoader(given, batch_size=B)))["id"]) == B  # given: as it says


def test_a_wrong_batch_size_is_refused_with_the_sizes_that_would_do() -> None:
    from types import SimpleNamespace

    from shardwise.loader.wrappers import _loader_batch

    batched = SimpleNamespace(batch_size=20, batch_format="numpy")
    shard = SimpleNamespace()
    with pytest.raises(
        ConfigError, match=r"batch_size=20 \(or None for a batched dataset\), not 7"
    ):
        _loader_batch(batched, 7, 2, False, shard)
    with pytest.raises(ConfigError) as split:  # split batches: None cannot do, not suggested
        _loader_batch(batched, None, 2, True, shard)
    assert "batch_size=40, not None" in str(split.value) and "or None" not in str(split.value)
    assert _loader_batch(batched, 40, 2, True, shard) == (True, 20)
