"""A dataset under accelerate's ``IterableDatasetShard`` (``dispatch_batches=False``), in one
process, playing each of 2 ranks in turn: every rank gets its own share at the places the
shard keeps (the epoch once, no read twice), ``len`` is what the wrapper expects, a
``skip_batches`` resume skips without reading the skipped units, and what cannot be served
exactly is a ConfigError naming the wrapper. The dispatcher (2 real processes) is tested in
tests/integrations/test_accelerate.py and test_hf_trainer.py."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _loaderdata import make_parquet
from accelerate.data_loader import DataLoaderShard, IterableDatasetShard
from torch.utils.data import DataLoader

import shardwise.loader.batches.reading as reading_module
from shardwise.errors import ConfigError
from shardwise.loader import StreamingDataset
from shardwise.loader.hosted import hosted_items
from shardwise.loader.placement import Placement
from shardwise.loader.wrappers import Hosting

ROWS, B, R = 1_003, 10, 2


def _ds(path: Path, fmt: str | None, **kw: Any) -> StreamingDataset:
    return StreamingDataset(
        str(path), batch_size=B, batch_format=fmt, seed=3, columns=["id"], interleave=1, **kw
    )


def _rank(ds: StreamingDataset, r: int, workers: int, skip: int = 0) -> list[list[int]]:
    """The batches rank ``r`` gets from a DataLoaderShard over an IterableDatasetShard."""
    bs = None if ds.batch_format else B
    shard = IterableDatasetShard(ds, batch_size=bs, num_processes=R, process_index=r)
    loader = DataLoaderShard(shard, batch_size=bs, num_workers=workers, skip_batches=skip)
    assert len(loader) == ds.plan(max(1, workers), R).batches_per_rank
    return [np.asarray(b["id"]).tolist() for b in loader]


@pytest.mark.parametrize("fmt", ["numpy", "torch", None])
@pytest.mark.parametrize("workers", [0, 2])
def test_every_rank_gets_its_own_share_once(tmp_path: Path, fmt: Any, workers: int) -> None:
    ds = _ds(make_parquet(tmp_path / "d", ROWS, files=5), fmt)
    ranks = [_rank(ds, r, workers) for r in range(R)]
    assert len(ranks[0]) == len(ranks[1]) == ds.plan(max(1, workers), R).batches_per_rank
    ids = [i for rank in ranks for b in rank for i in b]
    assert all(len(b) == B for rank in ranks for b in rank)
    assert len(ids) == len(set(ids)) and ROWS - len(ids) < R * max(1, workers) * B
    plan = ds.plan(max(1, workers), R)
    for r in range(R):  # rank r's own share of the plan, nothing of the other rank's
        own = {int(u) for b in plan.rank_batches(r) for u in _ids(ds, b)}
        assert {i for b in ranks[r] for i in b} == own


def _ids(ds: StreamingDataset, pairs: np.ndarray) -> list[int]:
    """The ids of (unit, row) pairs (ids are row numbers in file order)."""
    starts = np.concatenate([[0], np.cumsum(ds.counts)])
    return [int(starts[u] + row) for u, row in pairs]


@pytest.mark.parametrize("fmt", ["numpy", None])
def test_skip_batches_continues_exactly_without_reading_what_it_skips(
    tmp_path: Path, fmt: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = _ds(make_parquet(tmp_path / "d", ROWS, files=5), fmt)
    reads: list[int] = []
    loader_of = reading_module.table_loader

    def counting(*args: Any, **kw: Any) -> Any:
        load = loader_of(*args, **kw)
        return lambda u: (reads.append(u), load(u))[1]

    monkeypatch.setattr(reading_module, "table_loader", counting)
    full = _rank(ds, 1, 0)
    whole = len(reads)
    reads.clear()
    k = 3 * len(full) // 4
    resumed = _rank(ds, 1, 0, skip=k)
    assert resumed == full[k:]
    assert 0 < len(reads) < whole, (len(reads), whole)  # the skipped units are not read


def test_a_batch_size_other_than_the_datasets_is_refused(tmp_path: Path) -> None:
    ds = _ds(make_parquet(tmp_path / "d", ROWS, files=5), None)
    shard = IterableDatasetShard(ds, batch_size=4, num_processes=R, process_index=0)
    with pytest.raises(ConfigError, match=r"IterableDatasetShard.*batch_size=10") as e:
        shard.set_epoch(0)
    assert "not 4" in str(e.value) and "per_device_eval_batch_size=10" in str(e.value)


def test_len_is_every_ranks_items(tmp_path: Path) -> None:
    ds = _ds(make_parquet(tmp_path / "d", ROWS, files=5), None)
    shard = IterableDatasetShard(ds, batch_size=B, num_processes=R, process_index=0)
    per_rank = ds.plan(1, R).samples_per_rank
    assert len(shard) == per_rank  # the shard's len: len(ds) // processes
    assert len(ds) == R * per_rank


def test_a_stateful_dataloader_under_a_wrapper_is_refused(tmp_path: Path) -> None:
    ds = _ds(make_parquet(tmp_path / "d", ROWS, files=5), "numpy")
    shard = IterableDatasetShard(ds, batch_size=None, num_processes=R, process_index=0)
    loader = DataLoaderShard(shard, batch_size=None, use_stateful_dataloader=True)
    with pytest.raises(ConfigError, match="use_stateful_dataloader=True"):
        next(iter(loader))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_plain_dataloader_after_a_wrapper_gets_the_datasets_own_split(
    tmp_path: Path, workers: int
) -> None:
    data = make_parquet(tmp_path / "d", ROWS, files=5)
    ds = _ds(data, "numpy", rank=0, world_size=R)
    assert _rank(ds, 0, workers)  # served once to a wrapper: rank 0's share at its places
    plain = [
        np.asarray(b["id"]).tolist() for b in DataLoader(ds, batch_size=None, num_workers=workers)
    ]
    expected = _ds(data, "numpy", rank=0, world_size=R)
    expected.set_epoch(1)  # a new pass is the next epoch
    loader = DataLoader(expected, batch_size=None, num_workers=workers)
    assert plain == [np.asarray(b["id"]).tolist() for b in loader]
    assert len(plain) == ds.plan(max(1, workers), R).batches_per_rank


def test_a_dispatched_pass_keeps_its_epoch_while_another_pass_runs(tmp_path: Path) -> None:
    """Under accelerate's dispatcher rank 0 serves every rank's piece in turn; a second
    pass over the same dataset in between (an evaluation over the training dataset) moves
    none of the later pieces to another epoch."""
    ds = _ds(make_parquet(tmp_path / "d", ROWS, files=5), "numpy", rank=0, world_size=R)
    hosting = Hosting("accelerate.DataLoaderDispatcher", True, R, 0, False, False, 0, B, 0, 1)
    place = Placement(0, R, 0, 1)

    def ids(items: Any) -> list[list[int]]:
        return [np.asarray(b["id"]).tolist() for b in items]

    ds.set_epoch(0)
    whole = ids(hosted_items(ds, hosting, place))
    ds.set_epoch(0)
    first = hosted_items(ds, hosting, place)
    head = ids(itertools.islice(first, len(whole) // 4))  # a quarter: rank 0's piece
    ds.set_epoch(0)  # the evaluation's own pass, to its end
    assert ids(hosted_items(ds, hosting, place)) == whole
    assert head + ids(first) == whole  # rank 1's piece still of epoch 0


def test_spawned_workers_are_served_as_forked_ones(tmp_path: Path) -> None:
    """A spawned worker's stack does not reach its DataLoader: the wrapper is read when its
    copy is pickled. A wrapped pass and then a plain one, each as with forked workers."""
    data = make_parquet(tmp_path / "d", ROWS, files=5)
    got = {}
    for ctx in ("fork", "spawn"):
        ds = _ds(data, "numpy", rank=0, world_size=R)
        shard = IterableDatasetShard(ds, batch_size=None, num_processes=R, process_index=0)
        wrapped = DataLoaderShard(
            shard, batch_size=None, num_workers=2, multiprocessing_context=ctx
        )
        plain = DataLoader(ds, batch_size=None, num_workers=2, multiprocessing_context=ctx)
        got[ctx] = [[np.asarray(b["id"]).tolist() for b in loader] for loader in (wrapped, plain)]
    assert got["spawn"] == got["fork"]
    assert len(got["fork"][0]) == len(got["fork"][1]) == ds.plan(2, R).batches_per_rank
