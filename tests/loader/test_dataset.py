"""StreamingDataset in real DataLoaders: equal steps, no repeats, exact resume, filters."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pytest
import torch
from _loaderdata import make_parquet
from torch.utils.data import DataLoader

import shardwise
from shardwise import PlanError, StreamingDataset
from shardwise.loader.state_version import check_version

N = 10_007


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("loader") / "ds", N)


def _ids(batch: Any) -> list[int]:
    ids = batch["id"]
    return ids.tolist() if hasattr(ids, "tolist") else list(ids)


def _run_rank(
    data: Path, rank: int, world: int, workers: int, bs: int, **kw: Any
) -> list[list[int]]:
    ds = StreamingDataset(
        str(data), batch_size=bs, rank=rank, world_size=world, num_workers=workers, **kw
    )
    if kw.get("batch_format"):
        loader = DataLoader(ds, batch_size=None, num_workers=workers)
    else:
        loader = DataLoader(ds, batch_size=bs, num_workers=workers)
    return [_ids(b) for b in loader]


@pytest.mark.parametrize("mode", [None, "numpy", "torch", "arrow"])
def test_four_ranks_two_workers_equal_and_disjoint(data: Path, mode: str | None) -> None:
    bs = 16
    runs = [_run_rank(data, r, 4, 2, bs, batch_format=mode, seed=7) for r in range(4)]
    if mode == "arrow":
        runs = [[b for b in run] for run in runs]
    steps = {len(r) for r in runs}
    assert len(steps) == 1, f"unequal steps per rank: {[len(r) for r in runs]}"
    assert all(len(b) == bs for run in runs for b in run)
    seen = [i for run in runs for b in run for i in b]
    assert len(seen) == len(set(seen))
    assert N - len(seen) < 4 * 2 * bs
    assert set(seen) <= set(range(N))


def test_modes_yield_the_same_sequence(data: Path) -> None:
    a = _run_rank(data, 1, 2, 2, 8, seed=3)
    b = _run_rank(data, 1, 2, 2, 8, seed=3, batch_format="numpy")
    c = _run_rank(data, 1, 2, 2, 8, seed=3, batch_format="arrow")
    assert a == b == c


def test_dataloader_order_is_the_plan_order(data: Path) -> None:
    ds = StreamingDataset(
        str(data), batch_size=8, rank=0, world_size=2, num_workers=3, batch_format="numpy"
    )
    plan = ds.plan()
    starts = np.cumsum([0, *ds.counts.tolist()])
    index = ds.index
    # ids are global row numbers in file order, so (unit, row) maps to id arithmetically
    unit_first = {u: int(starts[u]) for u in range(index.num_units)}
    expected = [[unit_first[int(u)] + int(r) for u, r in b] for b in plan.rank_batches(0)]
    got = [_ids(b) for b in DataLoader(ds, batch_size=None, num_workers=3)]
    assert got == expected


def test_epochs_differ_and_repeat_deterministically(data: Path) -> None:
    def epoch(e: int) -> list[int]:
        ds = StreamingDataset(
            str(data), batch_size=32, rank=0, world_size=1, batch_format="numpy", seed=1
        )
        ds.set_epoch(e)
        return [i for b in ds.iter_shard(0, 1) for i in _ids(b)]

    assert epoch(0) == epoch(0)
    assert epoch(0) != epoch(1)
    assert sorted(epoch(1))[:5] != epoch(1)[:5]  # shuffled


def test_no_shuffle_is_file_order(data: Path) -> None:
    ds = StreamingDataset(
        str(data), batch_size=10, shuffle=False, world_size=1, rank=0, batch_format="numpy"
    )
    ids = [i for b in ds.iter_shard(0, 1) for i in _ids(b)]
    assert ids == list(range(len(ids)))


def test_filter_keeps_exact_balance(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path))
    expr = (pc.field("label") == 3) | (pc.field("id") < 100)
    runs = [_run_rank(data, r, 3, 2, 4, filter=expr, columns=["id", "label"]) for r in range(3)]
    assert len({len(r) for r in runs}) == 1
    seen = [i for run in runs for b in run for i in b]
    matching = [i for i in range(N) if i % 10 == 3 or i < 100]
    assert len(seen) == len(set(seen)) and set(seen) <= set(matching)
    assert len(matching) - len(seen) < 3 * 2 * 4
    ds = StreamingDataset(
        str(data), batch_size=4, filter=expr, columns=["id"], world_size=1, rank=0
    )
    assert set(next(iter(ds)).keys()) == {"id"}


def test_explicit_iter_shard_without_dataloader(data: Path) -> None:
    """How a JAX loop or a DALI external source consumes a shard: plain iteration."""
    ds = StreamingDataset(str(data), batch_size=64, batch_format="numpy", seed=2)
    shards = [
        [i for b in ds.iter_shard(r, 2, w, 2) for i in b["id"].tolist()]
        for r in range(2)
        for w in range(2)
    ]
    assert len({len(s) for s in shards}) == 1
    flat = [i for s in shards for i in s]
    assert len(flat) == len(set(flat))


def test_rank_detection_from_environment(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    ds = StreamingDataset(str(data), batch_size=8)
    assert (ds.rank, ds.world_size) == (2, 3)
    assert StreamingDataset(str(data), batch_size=8, rank=0, world_size=1).world_size == 1


def _consume(ds: Any, workers: int, k: int | None) -> list[list[int]]:
    loader = DataLoader(
        ds, batch_size=None if ds.batch_format else ds.batch_size, num_workers=workers
    )
    out = []
    for i, b in enumerate(loader):
        if k is not None and i == k:
            break
        out.append(_ids(b))
    return out


def check_resumable(
    make: Callable[[], Any], consume: Callable[[Any, int | None], list[Any]], k: int
) -> None:
    """The generic save/load contract every resumable stage passes: consume k steps, save,
    restore into a fresh object, and the rest equals the uninterrupted run."""
    full = consume(make(), None)
    first = make()
    head = consume(first, k)
    state = first.state_dict(len(head))
    fresh = make()
    fresh.load_state_dict(state)
    tail = consume(fresh, None)
    assert head == full[:k]
    assert head + tail == full


@pytest.mark.parametrize("where", ["start", "middle", "end"])
@pytest.mark.parametrize("mode", [None, "numpy"])
def test_resume_same_topology_is_exact(data: Path, where: str, mode: str | None) -> None:
    def make() -> Any:
        ds = StreamingDataset(
            str(data), batch_size=16, rank=1, world_size=2, num_workers=2, batch_format=mode, seed=4
        )
        ds.set_epoch(3)
        return ds

    total = len(make()) if mode else len(make()) // 16
    k = {"start": 0, "middle": total // 2 + 1, "end": total}[where]
    check_resumable(make, lambda ds, k: _consume(ds, 2, k), k)


@pytest.mark.parametrize("where", ["start", "middle", "end"])
def test_elastic_resume_changes_world_and_workers(data: Path, where: str) -> None:
    bs = 8
    old = [
        StreamingDataset(
            str(data),
            batch_size=bs,
            rank=r,
            world_size=4,
            num_workers=2,
            batch_format="numpy",
            seed=9,
        )
        for r in range(4)
    ]
    total = len(old[0])
    k = {"start": 0, "middle": total // 3, "end": total}[where]
    before = [i for ds in old for b in _consume(ds, 2, k) for i in b]
    state = old[0].state_dict(k)
    assert all(ds.state_dict(k) == state for ds in old)  # ranks agree
    new = []
    for r in range(3):
        ds = StreamingDataset(
            str(data),
            batch_size=bs,
            rank=r,
            world_size=3,
            num_workers=1,
            batch_format="numpy",
            seed=9,
        )
        ds.load_state_dict(state)
        new.append(_consume(ds, 0, None))
    assert len({len(x) for x in new}) == 1
    after = [i for run in new for b in run for i in b]
    combined = before + after
    assert len(combined) == len(set(combined)), "a sample was repeated across the resume"
    planned = (N // (4 * 2 * bs)) * 4 * 2 * bs
    assert planned - len(combined) < 3 * 1 * bs  # only the new topology's remainder is left out


def test_states_of_the_former_version_continue_unless_a_padded_epoch_moved(data: Path) -> None:
    """Version 1 planned the rest of a padded epoch resumed on another topology otherwise:
    a state that went through such a resume is refused; any other state of 1 continues."""
    ds = StreamingDataset(
        str(data), batch_size=8, rank=0, world_size=1, num_workers=1, drop_last=False
    )
    one = ds.state_dict(5)
    assert one["version"] == 3
    ds.load_state_dict({**one, "version": 1})  # one resume: nothing planned differently yet
    moved = StreamingDataset(
        str(data), batch_size=8, rank=0, world_size=2, num_workers=1, drop_last=False
    )
    moved.load_state_dict(one)
    two = moved.state_dict(3)
    assert len(two["resumes"]) == 2
    moved.load_state_dict(two)
    with pytest.raises(PlanError, match="padded epoch"):
        moved.load_state_dict({**two, "version": 1})
    with pytest.raises(PlanError, match="unsupported state version 7"):
        moved.load_state_dict({**two, "version": 7})
    moved.load_state_dict({**two, "version": 2})  # version 2 planned unmixed epochs the same


def test_states_of_version_2_continue_unless_a_mixed_padded_epoch_moved_twice() -> None:
    """Version 2 planned the rest of a mixed padded epoch otherwise once it had moved to
    another topology twice (the second move counts samples the epoch holds twice anew)."""
    top = {"world_size": 1, "num_workers": 1, "batch_size": 4, "interleave": 64}
    padded, dropped = {**top, "drop_last": False}, {**top, "drop_last": True}
    point = [{"topology": padded, "consumed_batches": 3}]
    mixed = {"version": 2, "mixing": {"batching": "random"}}
    check_version({**mixed, "resumes": point * 2}, PlanError)  # one move: planned the same
    check_version({"version": 2, "resumes": point * 3}, PlanError)  # not mixed
    check_version({**mixed, "mixing": {"batching": "stratified"}, "resumes": point * 3}, PlanError)
    moved = [point[0], {"topology": dropped, "consumed_batches": 1}, point[0]]
    check_version({**mixed, "resumes": moved}, PlanError)  # the second move did not pad
    for state in (
        {**mixed, "resumes": point * 3},
        {"version": 2, "seq_len": 8, "resumes": point * 3},
    ):
        with pytest.raises(PlanError, match="padded epoch"):
            check_version(state, PlanError)
    check_version({**mixed, "version": 3, "resumes": point * 3}, PlanError)


def test_state_from_another_dataset_is_rejected(data: Path, tmp_path: Path) -> None:
    other = make_parquet(tmp_path / "other", 500)
    a = StreamingDataset(str(data), batch_size=4, world_size=1, rank=0, num_workers=1)
    b = StreamingDataset(str(other), batch_size=4, world_size=1, rank=0)
    with pytest.raises(PlanError, match="different dataset"):
        b.load_state_dict(a.state_dict(3))
    with pytest.raises(PlanError):
        a.state_dict(10**9)


def test_streaming_dataset_is_an_iterable_dataset() -> None:
    assert issubclass(StreamingDataset, torch.utils.data.IterableDataset)
    assert shardwise.StreamingDataset is StreamingDataset


def test_prefetch_budget_bounds_read_ahead(data: Path) -> None:
    ds = StreamingDataset(
        str(data), batch_size=16, world_size=1, rank=0, batch_format="numpy", prefetch_bytes=1
    )
    n = sum(1 for _ in ds.iter_shard(0, 1))
    assert n == len(ds)
    assert Counter(type(x) for x in [n]) == Counter({int: 1})


def _vector_data(root: Path, n: int = 600) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    root.mkdir(parents=True, exist_ok=True)
    ids = np.arange(n)
    emb = np.stack([ids * 1.0, ids * 2.0, ids * 3.0], axis=1).astype(np.float32)
    table = pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 3),
            "tok": pa.array([[int(i), int(i) + 1] for i in ids], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, root / "vec.parquet", row_group_size=100)
    return root


@pytest.mark.parametrize("mode", [None, "numpy", "torch"])
def test_numeric_list_columns_arrive_as_writable_matrices(tmp_path: Path, mode: str | None) -> None:
    import warnings

    ds = StreamingDataset(
        str(_vector_data(tmp_path / "vec")),
        batch_size=32,
        world_size=1,
        rank=0,
        batch_format=mode,
        seed=5,
        pad_to=2 if mode else None,  # a variable-length list type is 2-D in batches by pad_to
    )
    loader = DataLoader(ds, batch_size=None if mode else 32, num_workers=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. torch's "NumPy array is not writable"
        batches = list(loader)
    assert len(batches) == 600 // 32
    for b in batches:
        ids, emb, tok = (torch.as_tensor(b[k]) for k in ("id", "emb", "tok"))
        assert emb.shape == (32, 3) and emb.dtype == torch.float32
        assert tok.shape == (32, 2) and tok.dtype == torch.int32
        assert torch.equal(emb[:, 1], ids.float() * 2) and torch.equal(tok[:, 1], ids.int() + 1)
    if mode == "numpy":  # without a DataLoader the user gets the arrays themselves
        first = next(iter(ds))
        assert (
            first["emb"].shape == (32, 3)
            and first["emb"].flags.writeable
            and first["id"].flags.writeable
        )


def test_numpy_batches_cross_the_dataloader_as_numpy(data: Path) -> None:
    """numpy batches reach the training process as numpy arrays (by value through the
    worker's pipe), not as shared-memory tensors made by the DataLoader's default_convert."""
    from shardwise.loader import NumpyColumn

    ds = StreamingDataset(
        str(data), batch_size=64, rank=0, world_size=1, num_workers=2, batch_format="numpy", seed=3
    )
    batches = list(DataLoader(ds, batch_size=None, num_workers=2))
    assert batches and all(
        isinstance(b["id"], np.ndarray) and isinstance(b["id"], NumpyColumn) for b in batches
    )
    ids = np.concatenate([b["id"] for b in batches])
    assert len(ids) == len(set(ids.tolist())) == (N // 64) * 64
    t = torch.from_numpy(batches[0]["x"])  # zero-copy and writable
    t += 1
    assert batches[0]["x"].dtype == np.float32 and batches[0]["x"].flags.writeable


def test_default_interleave_is_sized_by_shuffle_bytes(data: Path) -> None:
    small = StreamingDataset(str(data), batch_size=8, world_size=1, rank=0, shuffle_bytes=1)
    assert small.interleave == 1
    units = small.index.units
    per_unit = 2 * sum(u.num_bytes for u in units) / len(units)
    mid = StreamingDataset(
        str(data), batch_size=8, world_size=1, rank=0, shuffle_bytes=int(per_unit * 5.5)
    )
    assert mid.interleave == 5
    big = StreamingDataset(str(data), batch_size=8, world_size=1, rank=0, shuffle_bytes=2**40)
    assert big.interleave == 64  # bounded whatever the budget
    assert (
        StreamingDataset(str(data), batch_size=8, world_size=1, rank=0, interleave=3).interleave
        == 3
    )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"batch_size": 2.5}, "batch_size must be an integer"),
        ({"batch_size": "8"}, "batch_size must be an integer"),
        ({"seed": "x"}, "seed must be an integer"),
        ({"drop_last": "no"}, "drop_last must be True or False"),
        ({"shuffle": 0}, "shuffle must be True or False"),
        ({"num_workers": -1}, "num_workers must be at least 0"),
        ({"interleave": 0}, "interleave must be at least 1"),
        ({"columns": "id"}, "columns must be a list of column names"),
        ({"filter": "id > 3"}, "filter must be a pyarrow.compute expression"),
        ({"filter": pc.field("nope") > 3}, "does not apply to the dataset's columns"),
        ({"pad_to": "longest"}, "pad_to='longest' pads numpy or torch batches"),
        ({"world_size": True}, "world_size must be an integer, got True"),  # was taken as 1
        ({"world_size": 1.5}, "world_size must be an integer, got 1.5"),  # was of replication
        ({"rank": 0.0}, "rank must be an integer, got 0.0"),
        ({"replication": 1.0}, "replication must be an integer, got 1.0"),
        ({"num_threads": 2.5}, "num_threads must be an integer, got 2.5"),
        ({"pin_memory": "yes"}, "pin_memory must be True or False"),
    ],
)
def test_bad_arguments_are_config_errors_naming_them(
    data: Path, kwargs: dict[str, Any], match: str
) -> None:
    """A wrong type or value is refused naming the argument: never coerced silently
    (batch_size=2.5 was 2, drop_last="no" was true) nor a raw ValueError/ArrowInvalid."""
    with pytest.raises(shardwise.ConfigError, match=match):
        StreamingDataset(str(data), **({"rank": 0, "world_size": 1} | kwargs))


def test_bad_epochs_and_states_are_config_errors(data: Path) -> None:
    ds = StreamingDataset(
        str(data), batch_size=np.int64(4), seed=np.int64(3), rank=0, world_size=1, num_workers=1
    )
    assert ds.batch_size == 4 and ds.seed == 3  # numpy integers are integers
    threads = StreamingDataset(str(data), num_threads=np.int64(2), rank=0, world_size=1)
    assert threads.num_threads == 2
    for call in (
        lambda: ds.set_epoch("a"),
        lambda: ds.set_epoch(-1),
        lambda: ds.state_dict(consumed_batches="3"),
        lambda: ds.load_state_dict(None),
        lambda: ds.load_state_dict({**ds.state_dict(0), "resumes": [{"x": 1}]}),
        lambda: ds.load_state_dict({**ds.state_dict(0), "epoch": "one"}),
        lambda: ds.plan(num_workers=2.5),  # was numpy's AxisError
        lambda: ds.topology(1, world_size=0),  # was the dataset's world size, silently
    ):
        with pytest.raises(shardwise.ConfigError):
            call()
    with pytest.raises(shardwise.ConfigError, match="iterable of items"):
        shardwise.parallel_map(abs, 5)


def test_the_former_home_of_the_class_still_names_it() -> None:
    """``StreamingDataset`` moved from ``loader.dataset`` to ``loader.iterable``: imports and
    pickles that name the old module get the class."""
    import pickle

    from shardwise.loader.dataset import StreamingDataset as former

    assert former is StreamingDataset
    assert pickle.loads(b"cshardwise.loader.dataset\nStreamingDataset\n.") is StreamingDataset
