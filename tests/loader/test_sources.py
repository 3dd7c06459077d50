"""Mixed sources through the real StreamingDataset on small Parquet and JSONL files:
exact quotas, stratified batches, column alignment, stats, resume and canonical workers."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise import ConfigError, PlanError, Source, StreamingDataset
from shardwise.plan import EpochPlan

SPAN = 100_000  # source s holds ids s*SPAN + i: a sample's source is its id // SPAN


def _parquet(path: Path, ids: np.ndarray, group: int, id_type: pa.DataType | None = None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": pa.array(ids, id_type or pa.int64()), "text": [f"t{i}" for i in ids]})
    pq.write_table(table, path, row_group_size=max(1, group))


def _jsonl(path: Path, ids: np.ndarray, key: str = "text") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        for i in ids.tolist():
            f.write(json.dumps({"id": i, key: f"t{i}"}) + "\n")


@pytest.fixture(scope="module")
def srcs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    _parquet(root / "web" / "a.parquet", np.arange(0, 700), 90)
    _parquet(root / "web" / "b.parquet", np.arange(700, 1000), 70)
    _jsonl(root / "code" / "c.jsonl", SPAN + np.arange(0, 230), key="content")
    _parquet(root / "tiny" / "t.parquet", 2 * SPAN + np.arange(0, 5), 5, pa.int32())
    _parquet(root / "empty" / "e.parquet", np.arange(0, 0), 1)
    return {
        "web": root / "web",
        "code": root / "code",
        "tiny": root / "tiny",
        "empty": root / "empty",
    }


def _sources(srcs: dict[str, Path], **rules: dict[str, Any]) -> list[Source]:
    out = []
    for name, rule in rules.items():
        cols = {"id": "id", "text": "content"} if name == "code" else None
        out.append(Source(str(srcs[name]), name=name, columns=cols, **rule))
    return out


def _rank_batches(ds: Any, rank: int, world: int, workers: int) -> list[list[int]]:
    per_worker = [
        [b["id"].tolist() for b in ds.iter_shard(rank, world, w, workers)] for w in range(workers)
    ]
    n = sum(len(x) for x in per_worker)
    return [per_worker[j % workers][j // workers] for j in range(n)]


def _global_batches(make: Any, world: int, workers: int) -> list[list[int]]:
    ranks = [_rank_batches(make(), r, world, workers) for r in range(world)]
    steps = {len(r) for r in ranks}
    assert len(steps) == 1, f"unequal steps per rank: {[len(r) for r in ranks]}"
    return [[i for r in ranks for i in r[step]] for step in range(steps.pop())]


def test_weights_give_exact_quotas_and_stats_match_what_is_read(srcs: dict[str, Path]) -> None:
    def make() -> Any:
        return StreamingDataset(
            _sources(srcs, web={"weight": 3.0}, code={"weight": 1.0}, tiny={"weight": 1.0}),
            batch_size=6,
            epoch_size=960,
            seed=3,
            world_size=2,
            num_workers=2,
            batch_format="numpy",
        )

    batches = _global_batches(make, 2, 2)
    ids = [i for b in batches for i in b]
    got = Counter(i // SPAN for i in ids)
    stats = make().stats()
    quotas = [s["samples"] for s in stats["per_source"]]
    assert [got[s] for s in range(3)] == quotas
    assert sum(quotas) == len(ids) == 2 * stats["samples_per_rank"]
    assert quotas == [576, 192, 192]  # 960 = 40 rounds of 2 ranks x 2 workers x 6: 3:1:1 exactly
    assert [s["source"] for s in stats["per_source"]] == ["web", "code", "tiny"]
    # the tiny source (5 samples) wraps around: every sample 38 times, 2 of them once more
    tiny = Counter(i for i in ids if i // SPAN == 2)
    assert set(tiny) == {2 * SPAN + k for k in range(5)} and sorted(tiny.values()) == [
        38,
        38,
        38,
        39,
        39,
    ]
    # the big source is downsampled: no sample twice
    web = [i for i in ids if i < SPAN]
    assert len(web) == len(set(web))


def test_repeat_upsamples_every_sample_once_before_any_twice(srcs: dict[str, Path]) -> None:
    ds = StreamingDataset(
        _sources(srcs, web={"repeat": 0.5}, code={"repeat": 1.5}),
        batch_size=5,
        drop_last=False,
        world_size=1,
        batch_format="numpy",
    )
    ids = [i for b in _rank_batches(ds, 0, 1, 1) for i in b]
    code = Counter(i for i in ids if i >= SPAN)
    assert len(code) == 230 and set(code.values()) == {1, 2}
    assert sum(code.values()) == ds.stats()["per_source"][1]["samples"]
    assert len([i for i in ids if i < SPAN]) == ds.stats()["per_source"][0]["samples"]


def test_choose_takes_a_different_subset_each_epoch(srcs: dict[str, Path]) -> None:
    ds = StreamingDataset(
        _sources(srcs, web={"choose": 400}, code={"choose": 100}),
        batch_size=10,
        world_size=1,
        batch_format="numpy",
    )
    seen = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        ids = [i for b in _rank_batches(ds, 0, 1, 1) for i in b]
        assert Counter(i // SPAN for i in ids) == {0: 400, 1: 100}
        seen.append({i for i in ids if i < SPAN})
    assert seen[0] != seen[1] and len(seen[0] & seen[1]) < 400


def test_an_empty_source_contributes_nothing(srcs: dict[str, Path]) -> None:
    ds = StreamingDataset(
        _sources(srcs, web={"weight": 1.0}, empty={"weight": 1.0}),
        batch_size=10,
        epoch_size=100,
        world_size=1,
        batch_format="numpy",
    )
    stats = ds.stats()["per_source"]
    assert [s["samples"] for s in stats] == [100, 0] and stats[1]["samples_stored"] == 0
    assert all(i < SPAN for b in _rank_batches(ds, 0, 1, 1) for i in b)


def test_stratified_batches_hold_each_share(srcs: dict[str, Path]) -> None:
    ds = StreamingDataset(
        _sources(srcs, web={"weight": 2.0}, code={"weight": 1.0}, tiny={"weight": 1.0}),
        batch_size=8,
        epoch_size=400,
        batching="stratified",
        world_size=2,
        num_workers=2,
        batch_format="numpy",
    )
    for rank in range(2):
        for batch in _rank_batches(ds, rank, 2, 2):
            assert Counter(i // SPAN for i in batch) == {0: 4, 1: 2, 2: 2}


def test_per_sample_mode_and_a_dataloader_mix_too(srcs: dict[str, Path]) -> None:
    from torch.utils.data import DataLoader

    ds = StreamingDataset(
        _sources(srcs, web={"weight": 1.0}, code={"weight": 1.0}),
        batch_size=4,
        epoch_size=200,
        batching="stratified",
        world_size=1,
        num_workers=2,
    )
    batches = [b["id"].tolist() for b in DataLoader(ds, batch_size=4, num_workers=2)]
    assert len(batches) == 50
    assert all(Counter(i // SPAN for i in b) == {0: 2, 1: 2} for b in batches)
    assert {type(t) for b in DataLoader(ds, batch_size=4, num_workers=0) for t in b["text"]} == {
        str
    }


def test_different_columns_are_refused_naming_sources_and_columns(srcs: dict[str, Path]) -> None:
    with pytest.raises(
        ConfigError, match=r"'web' and 'code' have different columns.*\['text'\].*\['content'\]"
    ):
        StreamingDataset(
            [Source(str(srcs["web"]), name="web"), Source(str(srcs["code"]), name="code")]
        )
    # columns= picks the ones both have
    ds = StreamingDataset(
        [Source(str(srcs["web"]), name="web"), Source(str(srcs["code"]), name="code")],
        columns=["id"],
        batch_size=10,
        batch_format="arrow",
    )
    assert next(iter(ds)).column_names == ["id"]
    with pytest.raises(ConfigError, match="source 'code' has no column"):
        StreamingDataset(
            [Source(str(srcs["web"]), name="web"), Source(str(srcs["code"]), name="code")],
            columns=["text"],
        )
    with pytest.raises(ConfigError, match=r"source 'code' has no column \['nope'\]"):
        StreamingDataset([Source(str(srcs["code"]), name="code", columns={"text": "nope"})])


def test_types_are_unified_and_paths_and_sources_do_not_mix(srcs: dict[str, Path]) -> None:
    ds = StreamingDataset(
        _sources(srcs, web={}, tiny={}), batch_size=5, batch_format="arrow", shuffle=False
    )
    types = {b.schema.field("id").type for b in ds}
    assert types == {pa.int64()}  # the tiny source stores int32
    with pytest.raises(ConfigError, match="not both"):
        StreamingDataset([Source(str(srcs["web"])), str(srcs["code"])])
    with pytest.raises(ConfigError, match="at most one of"):
        Source(str(srcs["web"]), weight=1.0, repeat=2.0)
    with pytest.raises(ConfigError, match="weight= to every source or to none"):
        StreamingDataset(_sources(srcs, web={"weight": 1.0}, code={}))
    with pytest.raises(ConfigError, match="on_error= to StreamingDataset"):
        Source(str(srcs["web"]), on_error="skip")
    with pytest.raises(ConfigError, match="Source"):
        StreamingDataset([Source(str(srcs["web"]), unit_bites=5)])
    with pytest.raises(ConfigError, match="distinct names"):
        StreamingDataset([Source(str(srcs["web"]), name="x"), Source(str(srcs["tiny"]), name="x")])


def test_without_the_new_arguments_nothing_changes(srcs: dict[str, Path]) -> None:
    ds = StreamingDataset(str(srcs["web"]), batch_size=8, seed=1, num_workers=1)
    assert type(ds.plan()) is EpochPlan and ds.mixing is None
    assert "mixing" not in ds.state_dict(consumed_batches=3)
    stats = ds.stats()
    assert stats["per_source"][0]["samples"] == 1000 // 8 * 8 == ds.stats()["samples_per_rank"]


@pytest.mark.parametrize("batching", ["random", "stratified"])
@pytest.mark.parametrize("after", [(2, 1), (2, 2), (1, 3)])
def test_resume_continues_exactly_on_the_same_and_another_topology(
    srcs: dict[str, Path], batching: str, after: tuple[int, int]
) -> None:
    def make(world: int, workers: int = 1) -> Any:
        return StreamingDataset(
            _sources(srcs, web={"weight": 1.0}, code={"weight": 1.0}),
            batch_size=6,
            epoch_size=480,
            batching=batching,
            seed=5,
            world_size=world,
            num_workers=workers,
            batch_format="numpy",
        )

    full = [_rank_batches(make(2), r, 2, 1) for r in range(2)]
    k = 7
    state = make(2).state_dict(consumed_batches=k)
    world, workers = after
    rest = []
    for r in range(world):
        ds = make(world, workers)
        ds.load_state_dict(state)
        rest.append(_rank_batches(ds, r, world, workers))
    if after == (2, 1):  # the same topology: each rank continues its own sequence exactly
        assert rest == [f[k:] for f in full]
    done = Counter(i for f in full for b in f[:k] for i in b) + Counter(
        i for r in rest for b in r for i in b
    )
    whole = Counter(i for f in full for b in f for i in b)
    assert done <= whole  # nothing consumed is repeated beyond the epoch's own repeats
    assert (
        whole - done
    ).total() < world * workers * 6 * 2  # only the recut's remainder is left out
    assert len({len(r) for r in rest}) == 1
    with pytest.raises(PlanError, match="other sources"):
        StreamingDataset(
            _sources(srcs, web={"weight": 2.0}, code={"weight": 1.0}),
            batch_size=6,
            epoch_size=480,
            batching=batching,
            seed=5,
        ).load_state_dict(state)


def test_a_state_of_another_plan_layout_is_refused_clearly(srcs: dict[str, Path]) -> None:
    def make(batching: str) -> Any:
        return StreamingDataset(
            _sources(srcs, web={"weight": 1.0}, code={"weight": 1.0}),
            batch_size=6,
            epoch_size=480,
            batching=batching,
            seed=5,
            num_workers=1,
        )

    for batching, layout in (("random", 2), ("stratified", 2)):
        state = make(batching).state_dict(consumed_batches=3)
        assert state["mixing"]["layout"] == layout
        make(batching).load_state_dict(state)
        # as saved before plans recorded a layout: random mixed epochs were dealt differently
        # then, and stratified batches all had the same make-up
        del state["mixing"]["layout"]
        with pytest.raises(PlanError, match=r"plan layout 1, this version's is 2.*set_epoch"):
            make(batching).load_state_dict(state)
        state["mixing"]["layout"] = 3
        with pytest.raises(PlanError, match="plan layout 3"):
            make(batching).load_state_dict(state)


def test_canonical_workers_give_the_same_global_batches_on_every_divisor_topology(
    srcs: dict[str, Path],
) -> None:
    def make(world: int) -> Any:
        return lambda: StreamingDataset(
            _sources(srcs, web={"weight": 2.0}, code={"weight": 1.0}),
            batch_size=12 // world,
            epoch_size=600,
            seed=9,
            world_size=world,
            canonical_workers=4,
            batch_format="numpy",
        )

    runs = {
        (n, w): _global_batches(make(n), n, w) for n, w in [(1, 1), (1, 4), (2, 2), (4, 1), (2, 1)]
    }
    first = runs[(1, 1)]
    # the grid is 4 ranks x 4 workers x 3 samples: 600 rounds down to 12 x 48 = 48 global
    # batches of 12
    assert len(first) == 48 and all(len(b) == 12 for b in first)
    for topo, batches in runs.items():
        assert batches == first, topo


def test_a_filter_applies_to_every_source_and_quotas_stay_exact(srcs: dict[str, Path]) -> None:
    import pyarrow.compute as pc

    ds = StreamingDataset(
        _sources(srcs, web={"repeat": 1.0}, code={"choose": 50}),
        batch_size=10,
        filter=(pc.field("id") < 500) | (pc.field("id") >= SPAN + 100),
        world_size=1,
        batch_format="numpy",
        drop_last=False,
    )
    stats = ds.stats()["per_source"]
    assert [s["samples_stored"] for s in stats] == [500, 130]
    ids = [i for b in _rank_batches(ds, 0, 1, 1) for i in b]
    assert all(i < 500 or i >= SPAN + 100 for i in ids)
    assert Counter(i // SPAN for i in ids) == {0: stats[0]["samples"], 1: stats[1]["samples"]}
    assert sum(s["samples"] for s in stats) == 550


def test_canonical_resume_with_another_interleave_continues_the_same_global_batches(
    srcs: dict[str, Path],
) -> None:
    def make(world: int, workers: int, interleave: int, state: dict[str, Any] | None = None) -> Any:
        def build() -> Any:
            ds = StreamingDataset(
                _sources(srcs, web={"weight": 2.0}, code={"weight": 1.0}),
                batch_size=12 // world,
                epoch_size=600,
                seed=9,
                world_size=world,
                num_workers=workers,
                canonical_workers=4,
                interleave=interleave,
                batch_format="numpy",
            )
            if state is not None:
                ds.load_state_dict(state)
            return ds

        return build

    full = _global_batches(make(2, 2, 4), 2, 2)
    state = make(2, 2, 4)().state_dict(consumed_batches=10)
    # a smaller machine, a smaller interleave: the grid keeps the one the epoch started with
    assert _global_batches(make(1, 4, 2, state), 1, 4) == full[10:]
    again = make(1, 4, 2, state)().state_dict(consumed_batches=7)
    assert [r["topology"]["interleave"] for r in again["resumes"]] == [4, 2]
    assert _global_batches(make(4, 1, 3, again), 4, 1) == full[17:]


def test_bad_source_rules_and_seeds_are_config_errors(srcs: dict[str, Path]) -> None:
    with pytest.raises(ConfigError, match="weight= must be a number"):
        Source(str(srcs["web"]), weight="0.5")
    with pytest.raises(ConfigError, match="repeat= must be a finite number"):
        Source(str(srcs["web"]), repeat=float("nan"))
    with pytest.raises(ConfigError, match="seed must be at least 0"):
        StreamingDataset(_sources(srcs, web={}, code={}), seed=-1)
    ds = StreamingDataset(_sources(srcs, web={"repeat": 0.57}, tiny={}), batch_size=1)
    assert [s["quota"] for s in ds.stats()["per_source"]] == [570, 5]  # floor(1000 * 0.57), not 569


def test_a_state_with_numpy_numbers_in_the_rules_is_json_and_loads_back(
    srcs: dict[str, Path],
) -> None:
    def make() -> Any:
        return StreamingDataset(
            _sources(srcs, web={"weight": np.float32(0.7)}, code={"weight": np.float64(0.3)}),
            epoch_size=np.int64(480),
            batch_size=6,
            seed=np.int64(5),
            num_workers=1,
        )

    state = make().state_dict(consumed_batches=3)
    make().load_state_dict(json.loads(json.dumps(state)))  # was: float32 is not JSON serializable
    counts = make().stats()["per_source"]
    assert [s["samples"] for s in counts] == [336, 144] and type(counts[0]["weight"]) is float
