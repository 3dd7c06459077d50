"""Properties of mixed sources through the real StreamingDataset (hypothesis): random
sources of small Parquet/JSONL files (an empty one, a tiny one, one smaller than a batch),
random rules, topologies and epochs. The files are written once; every example opens
them as a new dataset and reads every sample of the epoch."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from shardwise import PlanError, Source, StreamingDataset

SPAN = 100_000
SIZES = [0, 3, 40, 260, 700]  # source k holds ids k*SPAN + i
SETTINGS = settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    root = tmp_path_factory.mktemp("pool")
    paths = []
    for k, n in enumerate(SIZES):
        ids = k * SPAN + np.arange(n)
        if k % 2:
            path = root / f"s{k}.jsonl"
            path.write_text("".join(json.dumps({"id": int(i)}) + "\n" for i in ids))
        else:
            path = root / f"s{k}.parquet"
            pq.write_table(
                pa.table({"id": pa.array(ids, pa.int64())}),
                path,
                row_group_size=max(1, n // 3 or 1),
            )
        paths.append(str(path))
    return paths


rule_st = st.one_of(
    st.fixed_dictionaries({"repeat": st.sampled_from([0.5, 1.0, 1.5, 2.0])}),
    st.fixed_dictionaries({"choose": st.integers(0, 90)}),
    st.just({}),
)


def _rank_batches(ds: Any, rank: int, world: int, workers: int) -> list[list[int]]:
    per_worker = [
        [b["id"].tolist() for b in ds.iter_shard(rank, world, w, workers)] for w in range(workers)
    ]
    n = sum(len(x) for x in per_worker)
    return [per_worker[j % workers][j // workers] for j in range(n)]


def _global(make: Any, world: int, workers: int) -> list[list[int]]:
    ranks = [_rank_batches(make(world, workers), r, world, workers) for r in range(world)]
    assert len({len(r) for r in ranks}) == 1, "unequal steps per rank"
    return [[i for r in ranks for i in r[s]] for s in range(len(ranks[0]))]


@SETTINGS
@given(
    picked=st.lists(st.integers(0, len(SIZES) - 1), min_size=1, max_size=3, unique=True),
    rules=st.lists(rule_st, min_size=3, max_size=3),
    world=st.integers(1, 3),
    workers=st.integers(1, 2),
    batch=st.integers(1, 7),
    epoch=st.integers(0, 3),
    stratified=st.booleans(),
    seed=st.integers(0, 9),
)
def test_quotas_are_exact_and_nothing_repeats_beyond_the_rule(
    pool: list[str],
    picked: list[int],
    rules: list[dict],
    world: int,
    workers: int,
    batch: int,
    epoch: int,
    stratified: bool,
    seed: int,
) -> None:
    sources = [Source(pool[k], name=f"s{k}", **rules[j]) for j, k in enumerate(picked)]
    try:
        ds = StreamingDataset(
            sources,
            batch_size=batch,
            seed=seed,
            world_size=world,
            num_workers=workers,
            batching="stratified" if stratified else "random",
            batch_format="numpy",
        )
        ds.set_epoch(epoch)
        stats = ds.stats()
    except PlanError as exc:  # nothing to stream, or too little for one global batch
        assert "nothing to" in str(exc) or "fewer than" in str(exc) or "no samples" in str(exc), exc
        event("too little to stream")
        return
    event("streamed")
    batches = _global(lambda w, k: _same(ds), world, workers)
    ids = Counter(i for b in batches for i in b)
    realised = Counter(i // SPAN for i in ids.elements())
    for k, row in zip(picked, stats["per_source"]):
        assert realised[k] == row["samples"]  # the exact count ds.stats() reports
        size = SIZES[k]
        if size and row["samples"]:
            per = Counter(i for i in ids.elements() if i // SPAN == k)
            # every sample m or m+1 times: once before any twice, never beyond the rule
            lo = row["samples"] // size
            assert set(per.values()) <= {lo, lo + 1} and (lo == 0 or len(per) == size)
    if stratified:  # every global batch and every rank's batch: each share to within one
        for k, row in zip(picked, stats["per_source"]):
            share = row["samples"] / len(batches)
            for b in batches:
                assert abs(sum(i // SPAN == k for i in b) - share) < 1
                for r in range(world):
                    got = sum(i // SPAN == k for i in b[r * batch : (r + 1) * batch])
                    assert abs(got - share / world) < 1


def _same(ds: Any) -> Any:
    return ds


@SETTINGS
@given(
    c_per=st.sampled_from(
        [
            (2, [(1, 1), (1, 2), (2, 1)]),
            (4, [(1, 1), (2, 2), (4, 1), (1, 4), (2, 1)]),
            (6, [(1, 1), (3, 2), (2, 3), (6, 1), (1, 2)]),
        ]
    ),
    weights=st.lists(st.floats(0.2, 4), min_size=2, max_size=2),
    g_mult=st.integers(1, 2),
    seed=st.integers(0, 9),
    stratified=st.booleans(),
)
def test_canonical_workers_give_identical_global_batches_on_every_divisor_topology(
    pool: list[str],
    c_per: tuple[int, list[tuple[int, int]]],
    weights: list[float],
    g_mult: int,
    seed: int,
    stratified: bool,
) -> None:
    c, topologies = c_per
    g = c * g_mult * 2  # the global batch: a multiple of C (and of every world size here)

    def make(world: int, workers: int) -> Any:
        return StreamingDataset(
            [
                Source(pool[3], weight=weights[0], name="a"),
                Source(pool[4], weight=weights[1], name="b"),
            ],
            batch_size=g // world,
            epoch_size=500,
            seed=seed,
            world_size=world,
            num_workers=workers,
            canonical_workers=c,
            batch_format="numpy",
            batching="stratified" if stratified else "random",
        )

    runs = {t: _global(make, *t) for t in topologies}
    first = runs[topologies[0]]
    assert first and all(len(b) == g for b in first)
    for t, batches in runs.items():
        assert batches == first, t


@SETTINGS
@given(
    frac=st.floats(0, 1),
    after=st.sampled_from([(1, 1), (1, 2), (2, 1), (2, 2), (4, 1)]),
    canonical=st.booleans(),
    stratified=st.booleans(),
    seed=st.integers(0, 9),
    epoch=st.integers(0, 2),
)
def test_resume_continues_the_epoch_on_any_topology(
    pool: list[str],
    frac: float,
    after: tuple[int, int],
    canonical: bool,
    stratified: bool,
    seed: int,
    epoch: int,
) -> None:
    g = 8

    def make(world: int, workers: int) -> Any:
        ds = StreamingDataset(
            [Source(pool[2], repeat=2.0, name="a"), Source(pool[3], choose=90, name="b")],
            batch_size=g // world,
            seed=seed,
            world_size=world,
            num_workers=workers,
            canonical_workers=4 if canonical else None,
            batch_format="numpy",
            batching="stratified" if stratified else "random",
        )
        ds.set_epoch(epoch)
        return ds

    full = _global(make, 2, 2)
    k = int(frac * len(full))
    state = make(2, 2).state_dict(consumed_batches=k)

    def resumed(world: int, workers: int) -> Any:
        ds = make(world, workers)
        ds.load_state_dict(state)
        return ds

    rest = _global(resumed, *after)
    if canonical or after == (2, 2):  # the same global sequence continues
        assert rest == full[k:]
    else:  # the samples not yet consumed, recut: none repeated, fewer than one round left out
        done = Counter(i for b in full[:k] + rest for i in b)
        whole = Counter(i for b in full for i in b)
        assert done <= whole and (whole - done).total() < after[0] * after[1] * (g // after[0]) * 2
