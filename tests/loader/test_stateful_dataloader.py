"""torchdata's StatefulDataLoader saves and restores the dataset's own per-worker state:
a resume continues exactly, for 0, 1 and 2 workers, batched and per sample."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from torchdata.stateful_dataloader import StatefulDataLoader

from shardwise.errors import PlanError
from shardwise.loader import StreamingDataset

ROWS = 1500


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sdl")
    for f, (a, b) in enumerate(((0, 700), (700, ROWS))):
        pq.write_table(pa.table({"id": np.arange(a, b)}), root / f"p{f}.parquet", row_group_size=90)
    return root


def _ids(batch: Any) -> list[int]:
    return [int(i) for i in np.asarray(batch["id"]).ravel()]


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("mode", ["numpy", None])
def test_stateful_dataloader_resumes_exactly(data: Path, workers: int, mode: str | None) -> None:
    def make() -> tuple[Any, Any]:
        ds = StreamingDataset(
            str(data), batch_size=10, seed=5, batch_format=mode, rank=0, world_size=1
        )
        return ds, StatefulDataLoader(ds, batch_size=None if mode else 10, num_workers=workers)

    _, loader = make()
    full = [i for b in loader for i in _ids(b)]
    assert sorted(full) == list(range(ROWS))
    _, loader = make()
    it = iter(loader)
    before = [i for _ in range(23) for i in _ids(next(it))]
    state = loader.state_dict()
    del it
    _, resumed = make()
    resumed.load_state_dict(state)
    after = [i for b in resumed for i in _ids(b)]
    assert before + after == full  # the very same sequence, nothing repeated or lost


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("sdl_mixed")
    # a large source, a 5-row one (wraps around 40 times) and a middle one
    for name, first, n, group in (("a", 0, 700, 90), ("b", 100_000, 5, 2), ("c", 200_000, 130, 40)):
        pq.write_table(
            pa.table({"id": first + np.arange(n)}), root / f"{name}.parquet", row_group_size=group
        )
    return root


@pytest.mark.parametrize("batching", ["random", "stratified"])
@pytest.mark.parametrize("canonical", [None, 2])
def test_stateful_dataloader_resumes_mixed_sources_exactly(
    mixed: Path, batching: str, canonical: int | None
) -> None:
    from shardwise import Source

    def make() -> Any:
        sources = [
            Source(str(mixed / f"{n}.parquet"), weight=w, name=n)
            for n, w in (("a", 0.6), ("b", 0.2), ("c", 0.2))
        ]
        ds = StreamingDataset(
            sources,
            epoch_size=1000,
            batching=batching,
            canonical_workers=canonical,
            batch_size=10,
            seed=5,
            batch_format="numpy",
            rank=0,
            world_size=1,
        )
        return StatefulDataLoader(ds, batch_size=None, num_workers=2)

    full = [i for b in make() for i in _ids(b)]
    assert (
        len(full) == 1000 and sum(i // 100_000 == 1 for i in full) == 200
    )  # the 5-row source, 40 times
    loader = make()
    it = iter(loader)
    before = [i for _ in range(7) for i in _ids(next(it))]
    state = loader.state_dict()
    del it
    resumed = make()
    resumed.load_state_dict(state)
    assert before + [i for b in resumed for i in _ids(b)] == full


def test_a_workers_position_on_another_number_of_ranks_is_refused_by_name(data: Path) -> None:
    """Lightning saves rank 0's StatefulDataLoader state; on another number of ranks a
    worker's own count does not say what the others consumed: a PlanError, not a replay."""

    def make(world: int) -> Any:
        ds = StreamingDataset(str(data), batch_size=10, seed=5, rank=0, world_size=world)
        return StatefulDataLoader(ds, batch_size=10, num_workers=0)

    loader = make(2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = loader.state_dict()
    del it
    resumed = make(1)
    resumed.load_state_dict(state)
    with pytest.raises(PlanError, match="saved on 2 ranks x 1 workers: it continues on that"):
        next(iter(resumed))
