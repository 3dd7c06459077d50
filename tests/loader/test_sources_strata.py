"""Stratified batches through the real StreamingDataset (Parquet sources of uneven sizes,
one smaller than a batch): the epoch yields each source's quota exactly, every global
batch and every rank's batch holds each share to within one sample, ``ds.stats()``
reports what is read, and a state resumes exactly (also on canonical workers)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise import Source, StreamingDataset

SPAN = 100_000  # source s holds ids s*SPAN + i
SIZES = {"big": 701, "mid": 133, "small": 5}
WEIGHTS = {"big": 0.5, "mid": 0.3, "small": 0.2}


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("strata")
    out = {}
    for s, (name, n) in enumerate(SIZES.items()):
        ids = s * SPAN + np.arange(n)
        path = root / f"{name}.parquet"
        pq.write_table(pa.table({"id": ids, "x": ids * 2}), path, row_group_size=50)
        out[name] = str(path)
    return out


def _make(paths: dict[str, str], world: int, workers: int, batch: int, **kw: Any) -> Any:
    return StreamingDataset(
        [Source(p, weight=WEIGHTS[n], name=n) for n, p in paths.items()],
        epoch_size=600,
        batching="stratified",
        world_size=world,
        num_workers=workers,
        batch_size=batch,
        seed=2,
        batch_format="numpy",
        **kw,
    )


def _rank(ds: Any, rank: int, world: int, workers: int) -> list[list[int]]:
    per = [
        [b["id"].tolist() for b in ds.iter_shard(rank, world, w, workers)] for w in range(workers)
    ]
    return [per[j % workers][j // workers] for j in range(sum(len(x) for x in per))]


def _check(ranks: list[list[list[int]]], stats: dict[str, Any]) -> None:
    steps = {len(r) for r in ranks}
    assert len(steps) == 1
    n, world = steps.pop(), len(ranks)
    quotas = [row["samples"] for row in stats["per_source"]]
    got = Counter(i // SPAN for r in ranks for b in r for i in b)
    assert [got[s] for s in range(3)] == quotas  # exactly what ds.stats() says
    for step in range(n):
        glob = Counter(i // SPAN for r in ranks for i in r[step])
        for s in range(3):
            assert abs(glob[s] - quotas[s] / n) < 1
            for r in ranks:
                mine = sum(i // SPAN == s for i in r[step])
                assert abs(mine - quotas[s] / (n * world)) < 1
    for row in stats["per_source"]:
        assert row["batch_share_global_worst"] < 1 and row["batch_share_rank_worst"] < 1


@pytest.mark.parametrize(("world", "workers", "batch"), [(3, 2, 8), (3, 1, 7), (2, 2, 3)])
def test_quotas_exact_and_batches_within_one(
    paths: dict[str, str], world: int, workers: int, batch: int
) -> None:
    ds = _make(paths, world, workers, batch)
    stats = ds.stats()
    total = 600 // (world * workers * batch) * world * workers * batch
    quotas = [row["samples"] for row in stats["per_source"]]
    assert sum(quotas) == total
    # 0.2 of a batch of 3 is 0.6: the small source still takes its fifth of the epoch
    assert [abs(q - w * total) < 1 for q, w in zip(quotas, WEIGHTS.values())] == [True] * 3
    _check([_rank(ds, r, world, workers) for r in range(world)], stats)


def test_canonical_workers_same_global_batches_and_shares(paths: dict[str, str]) -> None:
    def glob(world: int, workers: int) -> list[list[int]]:
        ds = _make(paths, world, workers, 8 // world, canonical_workers=4)
        ranks = [_rank(ds, r, world, workers) for r in range(world)]
        _check(ranks, ds.stats())
        return [[i for r in ranks for i in r[s]] for s in range(len(ranks[0]))]

    one = glob(1, 1)
    assert glob(2, 2) == one == glob(4, 1)


def test_canonical_grid_of_six_every_rank_within_one(paths: dict[str, str]) -> None:
    """C=6: ranks of two (0-2 | 3-5) and of three (0-1 | 2-3 | 4-5) cross, and every rank's
    batch still holds each share to within one (the same global batches on all). Global
    batches of 6 (3 / 1.8 / 1.2): the digit-reversed split put a rank of three one sample off."""

    def glob(world: int, workers: int) -> list[list[int]]:
        ds = _make(paths, world, workers, 6 // world, canonical_workers=6)
        ranks = [_rank(ds, r, world, workers) for r in range(world)]
        _check(ranks, ds.stats())
        return [[i for r in ranks for i in r[s]] for s in range(len(ranks[0]))]

    one = glob(1, 1)
    assert glob(2, 3) == one == glob(3, 2) == glob(6, 1)
    # a state saved on 3 ranks continues the same global sequence on 2
    state = _make(paths, 3, 1, 2, canonical_workers=6).state_dict(consumed_batches=2)
    rest = []
    for r in range(2):
        ds = _make(paths, 2, 1, 3, canonical_workers=6)
        ds.load_state_dict(state)
        rest.append(_rank(ds, r, 2, 1))
    assert [[i for r in rest for i in r[s]] for s in range(len(rest[0]))] == one[2:]


def test_resume_exact_and_elastic(paths: dict[str, str]) -> None:
    full = [_rank(_make(paths, 2, 2, 6), r, 2, 2) for r in range(2)]
    k = 9
    state = _make(paths, 2, 2, 6).state_dict(consumed_batches=k)
    same = []
    for r in range(2):
        ds = _make(paths, 2, 2, 6)
        ds.load_state_dict(state)
        same.append(_rank(ds, r, 2, 2))
    assert same == [f[k:] for f in full]
    rest = []
    for r in range(3):
        ds = _make(paths, 3, 1, 5)
        ds.load_state_dict(state)
        rest.append(_rank(ds, r, 3, 1))
    assert len({len(r) for r in rest}) == 1
    whole = Counter(i for f in full for b in f for i in b)
    done = Counter(i for f in full for b in f[:k] for i in b) + Counter(
        i for r in rest for b in r for i in b
    )
    assert done <= whole  # nothing consumed twice
    assert (whole - done).total() < 3 * 5  # only the recut's last partial global batch
