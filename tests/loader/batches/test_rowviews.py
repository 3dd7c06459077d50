"""A piece's variable-length lists of numbers as views of their units' values: the same
rows, in the same order and of the same type, as the Arrow gather then conversion gives;
also where all rows have one length; gathered as before where they must be (nulls,
sliced units)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.loader.batches.convert import column_to_numpy
from shardwise.loader.batches.gather import gather
from shardwise.loader.batches.piece_maker import PieceMaker
from shardwise.loader.batches.rowviews import list_row_views, viewable
from shardwise.loader.batches.windows import Window


def _unit(u: int, lengths: list[int], large: bool = False) -> pa.Table:
    rows = [[1000 * u + 10 * i + j for j in range(k)] for i, k in enumerate(lengths)]
    t = pa.large_list(pa.int32()) if large else pa.list_(pa.int32())
    return pa.table({"id": np.arange(len(lengths)) + 1000 * u, "tokens": pa.array(rows, type=t)})


def _expected(tables: dict[int, pa.Table], unit_ids: np.ndarray, rows: np.ndarray) -> np.ndarray:
    return column_to_numpy(gather(tables, unit_ids, rows, {}).column(1).combine_chunks())


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=12), min_size=1, max_size=5),
    picks=st.integers(1, 60),
    large=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_views_equal_the_gathered_rows(
    lengths: list[list[int]], picks: int, large: bool, seed: int
) -> None:
    tables = {u: _unit(u, ls, large) for u, ls in enumerate(lengths)}
    rng = np.random.default_rng(seed)
    unit_ids = rng.integers(0, len(tables), picks)
    rows = np.asarray([rng.integers(0, len(lengths[u])) for u in unit_ids.tolist()])
    got = list_row_views(tables, unit_ids, rows, 1)
    want = _expected(tables, unit_ids, rows)
    assert want.dtype == object  # one length too: the type decides, not the values
    assert got is not None and got.dtype == object and len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and np.array_equal(g, w)
        assert not (len(g) and g.flags.writeable)  # Arrow's memory, as the gathered views are


def test_rows_of_one_length_are_views_too() -> None:
    got = list_row_views({0: _unit(0, [2, 2, 2])}, np.zeros(2, np.int64), np.asarray([2, 0]), 1)
    assert got is not None and got.dtype == object and got.shape == (2,)
    assert [r.tolist() for r in got] == [[20, 21], [0, 1]]


def test_refused_where_they_must_be_gathered() -> None:
    ids, rows = np.zeros(2, dtype=np.int64), np.asarray([0, 1])
    nulls = pa.table({"tokens": pa.array([[1, 2], None], type=pa.list_(pa.int32()))})
    assert list_row_views({0: nulls}, ids, rows, 0) is None
    inner = pa.table({"tokens": pa.array([[1, None], [3]], type=pa.list_(pa.int32()))})
    assert list_row_views({0: inner}, ids, rows, 0) is None
    assert list_row_views({0: _unit(0, [2, 3])}, ids, rows[:0], 1) is None
    assert viewable(pa.list_(pa.float32())) and viewable(pa.large_list(pa.int64()))
    assert not viewable(pa.list_(pa.bool_())) and not viewable(pa.list_(pa.string()))
    assert not viewable(pa.list_(pa.int32(), 4))  # fixed size: 2-D, gathered by numpy


def test_sliced_unit_views_its_own_rows() -> None:
    whole = _unit(0, [1, 2, 3, 4, 5])
    sliced = {0: pa.table({"id": whole.column(0).slice(2), "tokens": whole.column(1).slice(2)})}
    ids, rows = np.zeros(3, dtype=np.int64), np.asarray([2, 0, 1])
    got = list_row_views(sliced, ids, rows, 1)
    assert got is not None
    assert [g.tolist() for g in got] == [r.tolist() for r in _expected(sliced, ids, rows)]


def test_piece_maker_batches_are_the_same() -> None:
    tables = {u: _unit(u, [1 + (u + i) % 5 for i in range(9)]) for u in range(3)}
    rng = np.random.default_rng(0)
    unit_ids = np.repeat(np.arange(3), 9)
    rows = np.tile(np.arange(9), 3)
    perm = rng.permutation(27)
    win = Window(unit_ids[perm], rows[perm], tables=tables)
    for fmt in ("numpy", "torch"):
        piece = PieceMaker(fmt, 9).made([(win, 0, 27)])
        batches = [b for b, _ in PieceMaker(fmt, 9).batches(piece)]
        want = _expected(tables, unit_ids[perm], rows[perm])
        got = [r for b in batches for r in b["tokens"]]
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        assert [int(i) for b in batches for i in b["id"]] == (unit_ids * 1000 + rows)[perm].tolist()
