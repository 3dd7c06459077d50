"""Every batch format with strings and binary values (nulls, 32- and 64-bit offsets,
values of up to 90 KB) through real DataLoader workers: with the workers' rings the
batches are exactly those sent by value, those of the in-process path, and those of
spawned workers (types, column order and names, values)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader

from shardwise import StreamingDataset
from shardwise.loader.workers import receive

FORMATS = [None, "numpy", "torch", "arrow"]
N = 300


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("carried")
    rng = np.random.default_rng(5)
    for f, (lo, hi) in enumerate([(0, 90), (90, 230), (230, N)]):
        ids = list(range(lo, hi))
        sizes = rng.integers(2_000, 90_000, len(ids))
        jpg = [rng.bytes(int(s)) for s in sizes]
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "jpg": pa.array(jpg, pa.binary()),
                "img": pa.array([None if i % 11 == 3 else b for i, b in zip(ids, jpg)]),
                "big": pa.array([b[: int(s) // 20] for b, s in zip(jpg, sizes)], pa.large_binary()),
                "text": pa.array([None if i % 7 == 2 else f"ü{i} " * (i % 9) for i in ids]),
                "name": pa.array([f"n{i}" * 30 for i in ids], pa.large_string()),
            }
        )
        pq.write_table(table, root / f"p{f}.parquet", row_group_size=int(rng.integers(20, 70)))
    return root


def _canon(x: Any) -> Any:
    """A batch as comparable values, with the type of every container and column."""
    if isinstance(x, pa.RecordBatch):
        return ("rb", x.schema, x.schema.metadata, x.to_pylist())
    if isinstance(x, dict):
        return (type(x), [(k, _canon(v)) for k, v in x.items()])
    if isinstance(x, torch.Tensor):
        return ("tensor", x.dtype, tuple(x.shape), x.tolist())
    if isinstance(x, np.ndarray):
        return (type(x), x.dtype, x.shape, x.flags.writeable, [repr(v) for v in x.tolist()])
    if isinstance(x, list):
        return ("list", [_canon(v) for v in x])
    return (type(x), x)


def _epoch(
    data: Path, fmt: str | None, workers: int, collate: bool, context: str | None = None
) -> list[Any]:
    columns = ["id", "jpg", "big", "name"] if collate else None  # default_collate: no None
    ds = StreamingDataset(str(data), batch_size=8, batch_format=fmt, columns=columns, seed=2)
    per_sample = fmt is None and collate
    loader = DataLoader(
        ds,
        batch_size=8 if per_sample else None,
        num_workers=workers,
        multiprocessing_context=context if workers else None,
    )
    return [_canon(b) for b in loader]


def _cases() -> list[tuple[str | None, bool]]:
    return [(f, False) for f in FORMATS] + [(None, True)]


@pytest.mark.parametrize(("fmt", "collate"), _cases())
def test_two_workers_through_the_rings_equal_by_value(
    data: Path, fmt: str | None, collate: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    receive._maps.clear()
    carried = _epoch(data, fmt, 2, collate)
    assert receive._maps  # the workers' rings were used
    monkeypatch.setenv("SHARDWISE_SHM", "0")
    receive._maps.clear()
    by_value = _epoch(data, fmt, 2, collate)
    assert not receive._maps
    assert len(carried) == len(by_value) > 0
    assert carried == by_value


@pytest.mark.parametrize(("fmt", "collate"), _cases())
def test_a_worker_through_its_ring_equals_the_in_process_path(
    data: Path, fmt: str | None, collate: bool
) -> None:
    here = _epoch(data, fmt, 0, collate)
    there = _epoch(data, fmt, 1, collate)
    assert len(here) == len(there) > 0
    assert here == there


@pytest.mark.slow
@pytest.mark.parametrize(("fmt", "collate"), _cases())
def test_spawned_workers_equal_forked_ones(data: Path, fmt: str | None, collate: bool) -> None:
    receive._maps.clear()
    spawned = _epoch(data, fmt, 2, collate, "spawn")
    assert receive._maps
    assert spawned == _epoch(data, fmt, 2, collate, "fork")


def test_rings_are_sized_for_the_batches(data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from shardwise.loader.workers import setup, transport

    units = StreamingDataset(str(data), batch_size=8).index.units
    per_batch = sum(u.num_bytes for u in units) * 8 // sum(u.num_samples for u in units)
    assert setup.ring_bytes_for(units, 8) == setup.RING_BATCHES * per_batch
    assert setup.ring_bytes_for(units, 10**6) == setup.MAX_RING_BYTES
    assert setup.ring_bytes_for([], 8) == 0
    # a ring of 64 KiB by default could not hold batches of ~370 KB: the workers size theirs
    # (made after the fork, with the patched default)
    monkeypatch.setattr(transport, "RING_BYTES", 1 << 16)
    receive._maps.clear()
    carried = _epoch(data, "arrow", 2, False)
    sizes = {size for _, _, size in receive._maps.values()}
    assert sizes and min(sizes) >= setup.ring_bytes_for(units, 8) > 8 * (1 << 16)
    monkeypatch.setenv("SHARDWISE_SHM", "0")
    assert carried == _epoch(data, "arrow", 2, False)


def _no_read_only_tensors(worker_id: int) -> None:
    import warnings

    warnings.filterwarnings("error", message=".*not writable.*")


def test_torch_batches_keep_writable_tensors_in_workers(tmp_path: Path) -> None:
    # numbers with nulls are converted from Arrow, not gathered: a torch batch's tensors of
    # them own writable memory in the worker, as before; times of day come as durations do
    ids = np.arange(200)
    table = pa.table(
        {
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.repeat(ids, 3) * 0.5), 3),
            "score": pa.array([None if i % 5 == 0 else float(i) for i in ids]),
            "at": pa.array(ids * 1000, pa.time64("us")),
            "text": [f"t{i}" * (i % 4) for i in ids],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=70)
    ds = StreamingDataset(str(tmp_path), batch_size=16, batch_format="torch", seed=1)
    loader = DataLoader(ds, batch_size=None, num_workers=1, worker_init_fn=_no_read_only_tensors)
    got = list(loader)
    assert len(got) == 200 // 16 and all(b["emb"].shape == (16, 3) for b in got)
    assert all(b["score"].dtype == torch.float64 and b["score"].shape == (16,) for b in got)
    assert all(len(b["at"]) == 16 and isinstance(b["at"][0], dt.timedelta) for b in got)
    texts = Counter(t for b in got for t in b["text"].tolist())
    assert texts.total() == 192 and not texts - Counter(table["text"].to_pylist())
