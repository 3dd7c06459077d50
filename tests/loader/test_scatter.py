"""Windows built in plan order: their number columns made ahead, while the order is worked out."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _loaderdata import make_parquet

import shardwise.loader.threaded as threaded
from shardwise import FormatError, StreamingDataset
from shardwise.loader.gather import unit_views
from shardwise.loader.scatter import columns_ahead
from shardwise.plan.worker import WorkerPlan


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("scatter") / "ds", 2501, files=4)


def _expected(ds: Any) -> list[list[int]]:
    starts = np.cumsum([0, *ds.counts.tolist()])
    return [[int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)]


def _recording(monkeypatch: pytest.MonkeyPatch) -> tuple[list[dict[int, np.ndarray]], threading.Event]:
    made: list[dict[int, np.ndarray]] = []
    done = threading.Event()

    def recording(*args: Any) -> dict[int, np.ndarray]:
        made.append(columns_ahead(*args))
        done.set()
        return made[-1]

    monkeypatch.setattr(threaded, "columns_ahead", recording)
    return made, done


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_a_single_windows_columns_are_made_before_its_order_and_batches_are_views_of_them(
        data: Path, fmt: str, monkeypatch: pytest.MonkeyPatch) -> None:
    made, done = _recording(monkeypatch)
    original = WorkerPlan.iter_windows
    waited: list[bool] = []

    def windows(self: WorkerPlan) -> Any:
        waited.append(done.wait(10))  # made without the order
        return original(self)

    monkeypatch.setattr(WorkerPlan, "iter_windows", windows)
    ds = StreamingDataset(str(data), batch_size=50, interleave=64, batch_format=fmt, seed=3,
                          columns=["id", "x", "text"])
    batches = list(ds)
    assert waited == [True] and len(made) == 1 and sorted(made[0]) == [0, 1]  # id and x; not text
    assert [[int(i) for i in b["id"]] for b in batches] == _expected(ds)
    for b in batches:
        for name, i in (("id", 0), ("x", 1)):
            assert np.shares_memory(np.asarray(b[name]), made[0][i])


def test_no_columns_are_made_ahead_for_several_windows_or_arrow_batches(
        data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    made, _ = _recording(monkeypatch)
    for interleave, fmt in ((2, "numpy"), (64, "arrow")):
        ds = StreamingDataset(str(data), batch_size=50, interleave=interleave, batch_format=fmt, columns=["id"])
        assert [[int(i) for i in np.asarray(b["id"] if fmt == "numpy" else b.column("id"))] for b in ds] \
            == _expected(ds)
    assert made == []


def test_columns_ahead_take_the_first_units_types_and_nothing_from_a_unit_that_failed() -> None:
    table = pa.table({"a": np.arange(5, dtype=np.int16), "s": ["x"] * 5,
                      "e": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(15, np.float32)), 3)})
    read: Future[Any] = Future()
    read.set_result((table, unit_views({7: table}, 7, False)))
    out = columns_ahead(11, read, 7)
    assert {i: (c.shape, c.dtype) for i, c in out.items()} == {0: ((11,), np.int16), 2: ((11, 3), np.float32)}
    failed: Future[Any] = Future()
    failed.set_exception(FormatError("broken", "f.parquet", "row group 0"))
    cancelled: Future[Any] = Future()
    cancelled.cancel()
    assert columns_ahead(11, failed, 7) == {} and columns_ahead(11, cancelled, 7) == {}


@pytest.mark.parametrize("kind", ["whole", "partial", "repeated"])
def test_window_columns_hold_each_sample_at_its_place_from_whole_and_partial_units(kind: str) -> None:
    # a unit all of whose rows are in the window once is written in one pass, the others
    # (some rows elsewhere, or rows repeated as a repeated source's are) block by block:
    # both put row rows[i] of unit unit_ids[i] at place i, strings as the same objects
    from concurrent.futures import ThreadPoolExecutor

    from shardwise.loader.scatter import WindowColumns

    rng = np.random.default_rng(5)
    tables = {u: pa.table({"id": np.arange(n) + 1000 * u,
                           "s": [None if i % 7 == 3 else f"u{u}r{i}" for i in range(n)],
                           "e": pa.FixedSizeListArray.from_arrays(pa.array(np.arange(2 * n, dtype=np.float32)), 2)})
              for u, n in ((3, 9000), (5, 10), (8, 4500))}
    pairs = [(u, r) for u, t in tables.items() for r in range(t.num_rows) if not (kind != "whole" and u == 3 and r % 3)]
    if kind == "repeated":  # as many rows of unit 3 as it has, a third of them three times
        pairs += [(3, r) for r in range(9000) if r % 3 == 0] * 2
    order = rng.permutation(len(pairs))
    unit_ids = np.array([pairs[i][0] for i in order])
    rows = np.array([pairs[i][1] for i in order])
    with ThreadPoolExecutor(2) as pool:
        build = WindowColumns(unit_ids, rows, tables[3].schema, pool)
        for u, t in tables.items():
            build.add(u, unit_views({u: t}, u, True))
        ids, strings, emb = build.result() or []
    assert ids.tolist() == [1000 * u + r for u, r in zip(unit_ids.tolist(), rows.tolist())]
    assert strings.tolist() == [tables[u].column("s")[r].as_py() for u, r in zip(unit_ids.tolist(), rows.tolist())]
    assert emb.tolist() == [[2 * r, 2 * r + 1] for r in rows.tolist()]
