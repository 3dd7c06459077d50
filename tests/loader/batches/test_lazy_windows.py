"""Windows' orders worked out when first needed (:class:`PlanWindows`): the same orders and
lengths as the eager ones for every seed, topology, resume point, with and without head
windows and on canonical workers; and a window's order is not worked out before a piece
needs it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _loaderdata import make_parquet

from shardwise import StreamingDataset
from shardwise.loader.batches.heads import HeadWindows, PartReading
from shardwise.loader.batches.pieces import PlanWindows, iter_pieces
from shardwise.loader.parts import make_reading
from shardwise.plan.compose import WorkerWindows

N = 3000


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("lazy") / "ds", N, files=3, seed=4)


class Counting:
    """A worker whose windows' orders are counted as they are worked out."""

    def __init__(self, wp: WorkerWindows) -> None:
        self.wp, self.made = wp, 0
        self.slot, self.skip, self.num_samples = wp.slot, wp.skip, wp.num_samples

    def iter_windows(self) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
        for window in self.wp.iter_windows():
            self.made += 1
            yield window

    def window_units(self) -> list[list[int]]:
        return self.wp.window_units()

    def units(self) -> list[int]:
        return self.wp.units()


def _worker(ds: Any, workers: int, world: int, rank: int, worker: int, skip: int) -> Any:
    wp = ds.plan(num_workers=workers, world_size=world).worker(rank, worker)
    skip = min(skip, wp.num_samples)
    wp.skip, wp.num_samples = wp.skip + skip, wp.num_samples - skip
    reading = make_reading(ds)
    return reading, (HeadWindows(wp, reading) if isinstance(reading, PartReading) else wp)


@pytest.mark.parametrize("heads", [False, True])
@pytest.mark.parametrize(
    ("seed", "workers", "world", "skip", "kw"),
    [
        (0, 1, 1, 0, {}),
        (3, 2, 1, 48, {}),
        (7, 2, 2, 160, {"shuffle": False}),
        (11, 1, 2, 16, {"interleave": 2}),
        (5, 2, 2, 32, {"canonical_workers": 4}),
    ],
)
def test_lazy_orders_are_the_eager_ones(
    data: Path, heads: bool, seed: int, workers: int, world: int, skip: int, kw: dict[str, Any]
) -> None:
    args: dict[str, Any] = {"batch_size": 16, "batch_format": "numpy", "interleave": 8}
    if heads:
        args["first_window"] = "heads"
    ds = StreamingDataset(str(data), seed=seed, **(args | kw))
    for rank in range(world):
        for worker in range(workers):
            reading, wp = _worker(ds, workers, world, rank, worker, skip)
            eager = list(wp.iter_windows())
            counted = Counting(wp)
            lazy = PlanWindows(reading, counted)
            assert counted.made == 0 and len(lazy) == len(eager)
            assert lazy.units == [units for units, _, _ in eager]
            lengths = lazy.lengths()
            for w, (units, unit_ids, rows) in enumerate(eager):
                assert next(lengths) == len(rows) and counted.made == w + 1
                got = lazy[w]
                assert got[0] == units
                np.testing.assert_array_equal(got[1], unit_ids)
                np.testing.assert_array_equal(got[2], rows)
            assert list(lengths) == [] and counted.made == len(eager)


def test_the_next_window_is_ordered_only_when_a_piece_reaches_it(data: Path) -> None:
    ds = StreamingDataset(
        str(data), batch_size=16, batch_format="numpy", interleave=8, first_window="heads"
    )
    reading, wp = _worker(ds, 1, 1, 0, 0, 0)
    counted = Counting(wp)
    lazy = PlanWindows(reading, counted)
    first = reading.first_piece(len(lazy[0][2]))
    assert first is not None and len(lazy) > 1
    pieces = iter_pieces(lazy.lengths(), 4096, first=first)
    assert next(pieces) == [(0, 0, first)] and counted.made == 1  # heads only
    assert next(pieces)[-1][0] == 1 and counted.made == 2
