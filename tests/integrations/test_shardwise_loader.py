"""``ShardwiseLoader`` in one process: the state it saves names the batches of the pass it
is in, also right after ``set_epoch`` of the next epoch (an epoch-begin checkpoint), and its
passes keep their epochs while an evaluation loader over the dataset sets others."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from _loaderdata import make_parquet

from shardwise import StreamingDataset
from shardwise.integrations.hf import ShardwiseLoader

ROWS = 403


def _loader(data: Path) -> tuple[StreamingDataset, ShardwiseLoader]:
    ds = StreamingDataset(
        data, batch_size=10, batch_format="numpy", columns=["id"], rank=0, world_size=1
    )
    return ds, ShardwiseLoader(ds, num_workers=2)


def _ids(loader: Any) -> list[int]:
    return [int(i) for batch in loader for i in batch["id"]]


def test_a_state_saved_after_set_epoch_starts_that_epoch(tmp_path: Path) -> None:
    data = make_parquet(tmp_path / "d", ROWS, files=3)
    ds, loader = _loader(data)
    first = _ids(loader)
    loader.set_epoch(1)
    state = loader.state_dict()  # before any batch of epoch 1
    assert state["epoch"] == 1
    _, resumed = _loader(data)
    resumed.load_state_dict(state)
    again = _ids(resumed)
    _, fresh = _loader(data)
    fresh.set_epoch(1)
    assert again == _ids(fresh)
    assert len(again) == len(first) == 400 and again != first


def _epochs_with_evaluations(loader: ShardwiseLoader, evaluation: Any, epochs: int) -> Any:
    """Passes over ``loader``, each after an evaluation pass over ``evaluation`` (and one
    more after 3 batches); yields each pass's batches' ids as it ends."""
    for _ in range(epochs):
        _ids(evaluation)
        batches = []
        for k, batch in enumerate(loader):
            batches.append([int(i) for i in batch["id"]])
            if k == 3:
                _ids(evaluation)
            if len(batches) == 5:
                yield "at5", loader.state_dict()
        yield "epoch", batches


def test_evaluations_through_accelerates_wrapper_leave_the_loaders_epochs(
    tmp_path: Path,
) -> None:
    """A prepared evaluation DataLoader over the training dataset (accelerate's
    DataLoaderShard) sets the dataset's epoch to its own count of passes, 0 again in a
    resumed process. A ShardwiseLoader's passes keep their own epochs: resumed from 5
    batches into epoch 1, it trains exactly what the uninterrupted run trained after them
    (its epoch 2 once repeated epoch 1's order)."""
    from accelerate.data_loader import DataLoaderShard

    data = make_parquet(tmp_path / "d", ROWS, files=3)
    ds, loader = _loader(data)
    steps = list(
        _epochs_with_evaluations(loader, DataLoaderShard(ds, batch_size=None, num_workers=2), 3)
    )
    saved = [s for what, s in steps if what == "at5"][1]
    full = [s for what, s in steps if what == "epoch"]
    assert full[0] != full[1] != full[2]
    ds2, resumed = _loader(data)
    resumed.load_state_dict(saved)
    rest = [
        s
        for what, s in _epochs_with_evaluations(
            resumed, DataLoaderShard(ds2, batch_size=None, num_workers=2), 2
        )
        if what == "epoch"
    ]
    assert rest == [full[1][5:], full[2]]
