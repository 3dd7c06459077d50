"""Model-parallel groups: ``replication=R`` (and ``dp_rank=``/``dp_size=``) make the ranks of a
group read identical items while the plan's contracts hold between groups, across resumes."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from _loaderdata import make_parquet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise import ConfigError, StreamingDataset, index_dataset
from shardwise.index import DatasetIndex

N = 1_503


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> DatasetIndex:
    return index_dataset(str(make_parquet(tmp_path_factory.mktemp("repl") / "ds", N, files=4)))


@st.composite
def groups(draw: st.DrawFn, most: int = 8) -> tuple[int, int]:
    """(world size, replication) with the replication dividing the world size."""
    world = draw(st.integers(1, most))
    return world, draw(st.sampled_from([r for r in range(1, world + 1) if world % r == 0]))


def _ranks(
    index: DatasetIndex, world: int, repl: int, workers: int, bs: int, **kw: Any
) -> list[Any]:
    return [
        StreamingDataset(
            index,
            rank=r,
            world_size=world,
            replication=repl,
            batch_size=bs,
            num_workers=workers,
            columns=["id"],
            **kw,
        )
        for r in range(world)
    ]


def _streams(ds: Any, workers: int) -> list[list[int]]:
    """What each worker of this training rank yields (ids), through the data-parallel rank."""
    return [
        [s["id"] for s in ds.iter_shard(ds.dp_rank, ds.dp_size, w, workers)] for w in range(workers)
    ]


def _plan_ids(ds: Any, dp_rank: int, batches: int) -> list[int]:
    """Ids of the first ``batches`` batches the plan gives data-parallel rank ``dp_rank``."""
    starts = np.cumsum([0, *ds.counts.tolist()])
    return [
        int(starts[u]) + int(r) for b in ds.plan().rank_batches(dp_rank)[:batches] for u, r in b
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    topo=groups(),
    workers=st.integers(1, 3),
    bs=st.integers(1, 16),
    seed=st.integers(0, 3),
    pad=st.booleans(),
)
def test_groups_read_identically_and_groups_are_disjoint(
    index: DatasetIndex, topo: tuple[int, int], workers: int, bs: int, seed: int, pad: bool
) -> None:
    world, repl = topo
    ranks = _ranks(index, world, repl, workers, bs, seed=seed, drop_last=not pad)
    assert [(ds.dp_rank, ds.dp_size) for ds in ranks] == [
        (r // repl, world // repl) for r in range(world)
    ]
    streams = [_streams(ds, workers) for ds in ranks]
    for r in range(world):  # every rank of a group gets exactly what its first rank gets
        assert streams[r] == streams[r - r % repl]
    assert len({sum(len(s) for s in run) for run in streams}) == 1  # equal steps on every rank
    per_group = [[i for s in streams[g * repl] for i in s] for g in range(world // repl)]
    assert all(len(ids) % bs == 0 for ids in per_group)
    everything = [i for ids in per_group for i in ids]
    if pad:
        assert (
            set(everything) == set(range(N))
            and len(everything) - N < (world // repl) * workers * bs
        )
    else:
        assert len(everything) == len(set(everything)), "two groups shared a sample"
        assert N - len(everything) < (world // repl) * workers * bs
    plain = StreamingDataset(
        index,
        rank=0,
        world_size=world // repl,
        batch_size=bs,
        num_workers=workers,
        columns=["id"],
        seed=seed,
        drop_last=not pad,
    )
    assert streams[0] == _streams(plain, workers)  # the plan is the data-parallel world's plan


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    old=groups(6),
    new=groups(6),
    workers=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    bs=st.integers(1, 12),
    at=st.floats(0, 1),
    saver=st.integers(0, 5),
)
def test_a_state_saved_on_any_rank_resumes_every_rank_of_every_group(
    index: DatasetIndex,
    old: tuple[int, int],
    new: tuple[int, int],
    workers: tuple[int, int],
    bs: int,
    at: float,
    saver: int,
) -> None:
    (world, repl), (world2, repl2), (k1, k2) = old, new, workers
    ranks = _ranks(index, world, repl, k1, bs, seed=5)
    consumed = int(at * ranks[0].plan().batches_per_rank)
    state = ranks[saver % world].state_dict(consumed_batches=consumed)
    assert all(ds.state_dict(consumed_batches=consumed) == state for ds in ranks)
    before = [i for g in range(world // repl) for i in _plan_ids(ranks[0], g, consumed)]
    resumed = _ranks(index, world2, repl2, k2, bs, seed=5)
    for ds in resumed:
        ds.load_state_dict(state)
    streams = [_streams(ds, k2) for ds in resumed]
    assert all(streams[r] == streams[r - r % repl2] for r in range(world2))
    assert len({sum(len(s) for s in run) for run in streams}) == 1
    after = [i for g in range(world2 // repl2) for s in streams[g * repl2] for i in s]
    combined = before + after
    assert len(combined) == len(set(combined)), "a sample was repeated across the resume"
    assert N - len(combined) < ((world // repl) * k1 + (world2 // repl2) * k2) * bs


def test_explicit_dp_rank_and_size_are_the_plan_s_ranks(index: DatasetIndex) -> None:
    # a 2 x 3 mesh laid out the other way: data-parallel rank = rank % 2
    ranks = [
        StreamingDataset(
            index,
            rank=r,
            world_size=6,
            dp_rank=r % 2,
            dp_size=2,
            batch_size=8,
            num_workers=2,
            columns=["id"],
        )
        for r in range(6)
    ]
    streams = [_streams(ds, 2) for ds in ranks]
    assert streams[0] == streams[2] == streams[4] != streams[1] == streams[3] == streams[5]
    assert (ranks[3].rank, ranks[3].world_size, ranks[3].dp_rank, ranks[3].dp_size) == (3, 6, 1, 2)
    assert len(ranks[0]) == len(StreamingDataset(index, world_size=2, batch_size=8, num_workers=2))


def test_replication_composes_with_rank_detection(
    index: DatasetIndex, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RANK", "5")
    monkeypatch.setenv("WORLD_SIZE", "8")
    ds = StreamingDataset(index, replication=4, batch_size=4)
    assert (ds.rank, ds.world_size, ds.dp_rank, ds.dp_size) == (5, 8, 1, 2)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"replication": 3}, r"replication=3 must divide the world size: 4 ranks"),
        ({"replication": 0}, r"replication must be at least 1, got 0"),
        ({"replication": True}, r"replication must be an integer, got True"),
        ({"dp_rank": 1}, r"dp_rank= and dp_size= go together; dp_size= is missing"),
        ({"dp_size": 2}, r"dp_rank= and dp_size= go together; dp_rank= is missing"),
        ({"dp_rank": 2, "dp_size": 2}, r"need 0 <= dp_rank < dp_size, got dp_rank=2, dp_size=2"),
        ({"dp_rank": 0, "dp_size": 0}, r"dp_size must be at least 1"),
        (
            {"replication": 2, "dp_rank": 0, "dp_size": 2},
            r"only one of .* got replication= and dp_rank=/dp_size=",
        ),
        ({"device_mesh": object(), "replication": 2}, r"got replication= and device_mesh="),
        ({"dp_dim": "dp"}, r"dp_dim='dp' names a dimension of device_mesh=; pass device_mesh= too"),
        ({"device_mesh": object()}, r"device_mesh= must be a torch DeviceMesh, got object"),
    ],
)
def test_bad_combinations_are_config_errors_naming_the_arguments(
    index: DatasetIndex, kw: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        StreamingDataset(index, rank=1, world_size=4, batch_size=4, **kw)


def test_a_worker_position_saved_on_one_rank_of_a_group_resumes_the_other(
    index: DatasetIndex,
) -> None:
    # torchdata's StatefulDataLoader saves each worker's own position (state_dict() without
    # arguments)
    a, b = _ranks(index, 4, 2, 2, 8, seed=2)[2:]
    full = [s["id"] for s in a.iter_shard(a.dp_rank, a.dp_size, 1, 2)]
    a.set_epoch(0)  # a second pass is the next epoch unless set_epoch says otherwise
    it = a.iter_shard(a.dp_rank, a.dp_size, 1, 2)
    head = [next(it)["id"] for _ in range(37)]
    b.load_state_dict(a.state_dict())
    tail = [s["id"] for s in b.iter_shard(b.dp_rank, b.dp_size, 1, 2)]
    assert head + tail == full and len(tail) == len(full) - 37 > 0


SPAN = 100_000  # in the mixed data, source s holds ids s * SPAN + i


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root = tmp_path_factory.mktemp("mixed")
    for s, (n, group) in enumerate([(900, 110), (260, 40)]):
        (root / f"s{s}").mkdir()
        pq.write_table(
            pa.table({"id": s * SPAN + np.arange(n)}),
            root / f"s{s}" / "p.parquet",
            row_group_size=group,
        )
    return [str(root / "s0"), str(root / "s1")]


def _global(
    mixed: list[str],
    world: int,
    repl: int,
    workers: int,
    state: dict[str, Any] | None = None,
    **kw: Any,
) -> list[list[int]]:
    """Every step's global batch (one batch per group, in group order), checking that the ranks
    of each group get the same batches in DataLoader order (worker batches taken in turn)."""
    runs = []
    for r in range(world):
        ds = _mixed_rank(mixed, r, world, repl, workers, **kw)
        if state is not None:
            ds.load_state_dict(state)
        per = [
            [b["id"].tolist() for b in ds.iter_shard(ds.dp_rank, ds.dp_size, w, workers)]
            for w in range(workers)
        ]
        runs.append([per[j % workers][j // workers] for j in range(sum(map(len, per)))])
    assert all(runs[r] == runs[r - r % repl] for r in range(world))
    return [
        [i for g in range(0, world, repl) for i in runs[g][step]] for step in range(len(runs[0]))
    ]


def _mixed_rank(mixed: list[str], rank: int, world: int, repl: int, workers: int, **kw: Any) -> Any:
    from shardwise import Source

    return StreamingDataset(
        [Source(mixed[0], weight=2.0), Source(mixed[1], weight=1.0)],
        rank=rank,
        world_size=world,
        replication=repl,
        batch_size=12 // (world // repl),
        num_workers=workers,
        batch_format="numpy",
        seed=4,
        **kw,
    )


def test_replication_composes_with_mixing_and_canonical_workers(mixed: list[str]) -> None:
    kw = {"epoch_size": 600, "batching": "stratified", "canonical_workers": 4}
    first = _global(mixed, 1, 1, 1, **kw)
    # 600 rounds down to the canonical grid (4 x 4 workers x 3 samples = 48): 48 global
    # batches of 12
    assert len(first) == 48 and all(len(b) == 12 for b in first)
    for s, quota in enumerate(
        (384, 192)
    ):  # weights 2:1, exact; stratified: every batch holds 8 + 4
        assert sum(i // SPAN == s for b in first for i in b) == quota
        assert all(sum(i // SPAN == s for i in b) == quota // 48 for b in first)
    for world, repl, workers in [(4, 2, 2), (8, 4, 1), (4, 1, 1), (8, 2, 1), (4, 4, 4)]:
        assert _global(mixed, world, repl, workers, **kw) == first, (world, repl, workers)
    # a state saved on one rank of 2 groups of 2 resumes 4 groups of 1 with the same global batches
    state = _mixed_rank(mixed, 3, 4, 2, 2, **kw).state_dict(consumed_batches=17)
    assert _global(mixed, 4, 1, 1, state, **kw) == first[17:]
