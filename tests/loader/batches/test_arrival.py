"""Windows built as their units arrive: each unit written at its place as it is read,
the first window's units read while the order is worked out."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _loaderdata import make_parquet

import shardwise.loader.batches.piece_maker as piece_maker
from shardwise import StreamingDataset
from shardwise.loader.batches.arrival import ArrivalWindow, arrival_schema
from shardwise.loader.batches.gather import unit_views
from shardwise.plan.worker_share import WorkerPlan


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_parquet(tmp_path_factory.mktemp("arrival") / "ds", 2501, files=4)


def _expected(ds: Any) -> list[list[int]]:
    starts = np.cumsum([0, *ds.counts.tolist()])
    return [[int(starts[u]) + int(r) for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)]


def _tables() -> dict[int, pa.Table]:
    return {
        u: pa.table(
            {
                "id": np.arange(n) + 1000 * u,
                "s": [None if i % 7 == 3 else f"u{u}r{i}" for i in range(n)],
                "e": pa.FixedSizeListArray.from_arrays(
                    pa.array(np.arange(2 * n, dtype=np.float32)), 2
                ),
            }
        )
        for u, n in ((3, 9000), (5, 10), (8, 4500))
    }


@pytest.mark.parametrize("kind", ["whole", "partial", "repeated"])
def test_pieces_hold_each_sample_from_whole_partial_and_repeated_units(kind: str) -> None:
    # rows rows[i] of unit unit_ids[i], whatever order the units arrive in and on whatever thread
    rng = np.random.default_rng(5)
    tables = _tables()
    pairs = [
        (u, r)
        for u, t in tables.items()
        for r in range(t.num_rows)
        if not (kind != "whole" and u == 3 and r % 3)
    ]
    if kind == "repeated":  # as many rows of unit 3 as it has, a third of them three times
        pairs += [(3, r) for r in range(9000) if r % 3 == 0] * 2
    order = rng.permutation(len(pairs))
    unit_ids = np.array([pairs[i][0] for i in order])
    rows = np.array([pairs[i][1] for i in order])
    units = sorted(tables)
    win = ArrivalWindow(units, [tables[u].num_rows for u in units], tables[3].schema)
    win.order(unit_ids, rows)  # before the units arrive, as the loader does
    with ThreadPoolExecutor(2) as pool:
        assert all(
            pool.map(lambda u: win.add(u, tables[u], unit_views({u: tables[u]}, u)), [8, 3, 5])
        )
    assert win.complete()
    got: list[list[Any]] = [[], [], []]
    for lo in range(0, len(pairs), 4096):
        for col, part in zip(got, win.piece(lo, min(len(pairs), lo + 4096))):
            col += part.to_pylist() if isinstance(part, pa.Array) else part.tolist()
    ids, strings, emb = got
    assert ids == [1000 * u + r for u, r in zip(unit_ids.tolist(), rows.tolist())]
    assert strings == [
        tables[u].column("s")[r].as_py() for u, r in zip(unit_ids.tolist(), rows.tolist())
    ]
    assert emb == [[2 * r, 2 * r + 1] for r in rows.tolist()]


@pytest.mark.parametrize("bad", ["nulls", "more_rows", "other_type"])
def test_a_unit_that_cannot_be_written_refuses_the_window(bad: str) -> None:
    good = pa.table({"a": np.arange(4, dtype=np.int32), "s": ["x"] * 4})
    other = {
        "nulls": pa.table({"a": pa.array([1, None], pa.int32()), "s": ["y", "z"]}),
        "more_rows": pa.table({"a": np.arange(9, dtype=np.int32), "s": ["y"] * 9}),
        "other_type": pa.table({"a": np.arange(2, dtype=np.int64), "s": ["y", "z"]}),
    }[bad]
    win = ArrivalWindow([0, 1], [4, 4], good.schema)
    assert win.add(0, good, unit_views({0: good}, 0))
    assert not win.add(1, other, unit_views({1: other}, 1))
    assert not win.complete()


def test_which_columns_arrival_windows_hold() -> None:
    ok = pa.schema(
        [
            ("a", pa.int8()),
            ("b", pa.float64()),
            ("s", pa.large_string()),
            ("y", pa.binary()),
            ("e", pa.list_(pa.float32(), 4)),
        ]
    )
    assert arrival_schema(ok, "numpy") and arrival_schema(ok, "torch")
    assert not arrival_schema(ok, "arrow") and not arrival_schema(ok, None)
    for t in (pa.list_(pa.int32()), pa.bool_(), pa.timestamp("ns"), pa.struct([("x", pa.int8())])):
        assert not arrival_schema(pa.schema([("a", pa.int8()), ("x", t)]), "numpy"), t


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_the_first_windows_units_are_read_before_its_order_is_known(
    data: Path, fmt: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    added: list[int] = []
    some = threading.Event()
    original_add = ArrivalWindow.add

    def add(self: ArrivalWindow, unit: int, *args: Any) -> bool:
        added.append(unit)
        some.set()
        return original_add(self, unit, *args)

    original_windows = WorkerPlan.iter_windows
    waited: list[bool] = []

    def windows(self: WorkerPlan) -> Any:
        waited.append(some.wait(10))  # units written without the order
        return original_windows(self)

    monkeypatch.setattr(ArrivalWindow, "add", add)
    monkeypatch.setattr(WorkerPlan, "iter_windows", windows)
    ds = StreamingDataset(
        str(data),
        batch_size=50,
        interleave=64,
        batch_format=fmt,
        seed=3,
        columns=["id", "x", "text"],
        first_window=None,  # the units of a window of whole units
    )
    batches = list(ds)
    assert waited == [True] and sorted(added) == list(range(ds.index.num_units))
    assert [[int(i) for i in b["id"]] for b in batches] == _expected(ds)


@pytest.mark.parametrize(("interleave", "fmt"), [(2, "numpy"), (3, "torch"), (64, "arrow")])
def test_several_windows_and_arrow_batches_give_the_plans_batches(
    data: Path, interleave: int, fmt: str
) -> None:
    ds = StreamingDataset(
        str(data), batch_size=50, interleave=interleave, batch_format=fmt, columns=["id", "text"]
    )
    got = [[int(i) for i in np.asarray(b["id"] if fmt != "arrow" else b.column("id"))] for b in ds]
    assert got == _expected(ds)


def test_a_refused_window_is_gathered_from_its_units_instead(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ArrivalWindow, "complete", lambda self: False)
    seen: list[bool] = []
    original = piece_maker.PieceMaker.make

    def make(self: Any, parts: Any) -> Any:
        seen.append(True)
        return original(self, parts)

    monkeypatch.setattr(piece_maker.PieceMaker, "make", make)
    ds = StreamingDataset(
        str(data), batch_size=50, interleave=4, batch_format="numpy", columns=["id", "x"]
    )
    assert [[int(i) for i in b["id"]] for b in ds] == _expected(ds) and seen
