"""The README's training loop resumes exactly: ``StreamingDataset`` built without
``num_workers=``, a ``DataLoader`` with 0, 1, 2 or 4 workers, ``ds.state_dict(
consumed_batches=step + 1)`` in the training process, then a resume on the same or
another topology. Every sample of the epoch is seen once, none twice."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torch.utils.data import DataLoader

from shardwise.errors import PlanError
from shardwise.loader import StreamingDataset

ROWS, BATCH = 2400, 16


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("loop")
    rng = np.random.default_rng(0)
    start = 0
    for f, n in enumerate((700, 900, 800)):
        table = pa.table({"id": np.arange(start, start + n), "x": rng.random(n, dtype=np.float32)})
        pq.write_table(table, root / f"p{f}.parquet", row_group_size=int(rng.integers(60, 200)))
        start += n
    return root


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in np.asarray(batch["id"]).ravel()]


def _consume(ds: Any, workers: int, steps: int | None) -> tuple[list[int], int]:
    """Run the README loop for ``steps`` steps (all when None); ids seen and steps done."""
    loader = DataLoader(ds, batch_size=None, num_workers=workers)
    seen: list[int] = []
    done = 0
    for step, batch in enumerate(loader):
        seen += _ids(batch)
        done = step + 1
        if steps is not None and done == steps:
            break
    return seen, done


def _rank_datasets(data: Path, world: int) -> list[Any]:
    return [
        StreamingDataset(
            str(data), batch_size=BATCH, seed=3, batch_format="numpy", rank=r, world_size=world
        )
        for r in range(world)
    ]


@pytest.mark.parametrize(
    ("first", "then"), [(0, 0), (1, 1), (2, 2), (4, 4), (4, 1), (0, 2), (2, 4), (1, 0)]
)
def test_readme_loop_resumes_exactly_on_any_worker_count(data: Path, first: int, then: int) -> None:
    ds = StreamingDataset(str(data), batch_size=BATCH, seed=3, batch_format="numpy")
    before, steps = _consume(ds, first, 11)
    state = ds.state_dict(consumed_batches=steps)
    resumed = StreamingDataset(str(data), batch_size=BATCH, seed=3, batch_format="numpy")
    resumed.load_state_dict(state)
    after, _ = _consume(resumed, then, None)
    everything = before + after
    assert len(everything) == len(set(everything)), "a sample was repeated"
    if first == then:  # the epoch is exactly the unresumed one: drop_last leaves out the remainder
        assert len(everything) == ROWS - ROWS % (max(first, 1) * BATCH)
    else:  # elastic: only the two topologies' remainders are left out
        assert ROWS - len(everything) < (max(first, 1) + max(then, 1)) * BATCH


def test_readme_loop_resumes_onto_another_world_size(data: Path) -> None:
    ranks = _rank_datasets(data, 2)
    before: list[int] = []
    for ds in ranks:
        seen, steps = _consume(ds, 2, 9)
        before += seen
    state = ranks[0].state_dict(consumed_batches=steps)
    assert state == ranks[1].state_dict(consumed_batches=steps)
    after: list[int] = []
    for ds in _rank_datasets(data, 3):
        ds.load_state_dict(state)
        seen, _ = _consume(ds, 1, None)
        after += seen
    everything = before + after
    assert len(everything) == len(set(everything))
    assert ROWS - len(everything) < (2 * 2 + 3) * BATCH  # only the two topologies' remainders


def test_explicit_iter_shard_is_what_the_state_describes(data: Path) -> None:
    ds = StreamingDataset(str(data), batch_size=BATCH, seed=1, batch_format="numpy")
    it = ds.iter_shard(0, 1, 0, 1)
    before = [i for _ in range(7) for i in _ids(next(it))]
    state = ds.state_dict(consumed_batches=7)
    resumed = StreamingDataset(str(data), batch_size=BATCH, seed=1, batch_format="numpy")
    resumed.load_state_dict(state)
    after = [i for w in range(3) for b in resumed.iter_shard(0, 1, w, 3) for i in _ids(b)]
    assert len(set(before + after)) == len(before + after) and len(before) == 7 * BATCH


def test_state_without_any_iteration_in_this_process_is_refused(data: Path) -> None:
    ds = StreamingDataset(str(data), batch_size=BATCH, batch_format="numpy")
    assert ds.state_dict(consumed_batches=0)["resumes"] is not None  # the start is the start
    with pytest.raises(PlanError, match="cannot tell how many DataLoader workers"):
        ds.state_dict(consumed_batches=3)


def _epoch_ids(loader: Any) -> list[int]:
    return [i for b in loader for i in _ids(b)]


@pytest.mark.parametrize(("mode", "first", "then"), [("numpy", 2, 1), (None, 2, 2)])
def test_persistent_workers_follow_set_epoch_and_resume_in_a_later_epoch(
    data: Path, mode: str | None, first: int, then: int
) -> None:
    """``persistent_workers=True`` workers keep the dataset they were started with: the
    epoch set in the training process must still reach them, and a state saved in
    epoch 1 resumes epoch 1 (before, every epoch streamed epoch 0's order)."""

    def make() -> Any:
        return StreamingDataset(str(data), batch_size=BATCH, seed=3, batch_format=mode)

    def loader(ds: Any, workers: int) -> Any:
        return DataLoader(
            ds,
            batch_size=None if mode else BATCH,
            num_workers=workers,
            prefetch_factor=4,
            persistent_workers=True,
        )

    ds = make()
    ref = make()
    ref.set_epoch(1)
    epoch1 = _epoch_ids(DataLoader(ref, batch_size=None if mode else BATCH, num_workers=first))
    persistent = loader(ds, first)
    ds.set_epoch(0)
    epoch0 = _epoch_ids(persistent)
    ds.set_epoch(1)
    before: list[int] = []
    for step, batch in enumerate(persistent):
        before += _ids(batch)
        if step == 8:
            state = ds.state_dict(consumed_batches=step + 1)
            break
    assert epoch0 != epoch1 and before == epoch1[: len(before)]
    resumed = make()
    resumed.load_state_dict(state)
    everything = before + _epoch_ids(loader(resumed, then))
    assert len(everything) == len(set(everything))
    assert ROWS - len(everything) < (first + then) * BATCH
    if first == then:
        assert everything == epoch1
