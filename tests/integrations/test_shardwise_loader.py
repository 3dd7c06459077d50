"""``ShardwiseLoader`` in one process: the state it saves names the batches of the pass it
is in, also right after ``set_epoch`` of the next epoch (an epoch-begin checkpoint)."""

from __future__ import annotations

from pathlib import Path

from _loaderdata import make_parquet

from shardwise import StreamingDataset
from shardwise.integrations.hf import ShardwiseLoader

ROWS = 403


def _loader(data: Path) -> tuple[StreamingDataset, ShardwiseLoader]:
    ds = StreamingDataset(
        data, batch_size=10, batch_format="numpy", columns=["id"], rank=0, world_size=1
    )
    return ds, ShardwiseLoader(ds, num_workers=2)


def _ids(loader: ShardwiseLoader) -> list[int]:
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
