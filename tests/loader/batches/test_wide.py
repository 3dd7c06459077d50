"""Wide binary and string values gathered value by value (loader/batches/wide.py): exactly
Arrow's take on the concatenated units, for every text type, nulls, units in several
chunks and slices; narrow values are left to Arrow's take."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.loader.batches.gather import gather
from shardwise.loader.batches.wide import WIDE, take_wide

TYPES = [pa.binary(), pa.large_binary(), pa.string(), pa.large_string()]


def _values(u: int, n: int, t: pa.DataType, nulls: bool, width: int) -> list[object]:
    out: list[object] = []
    for i in range(n):
        text = f"{u}:{i}:" + "x" * (width + (i * 37) % 500)
        out.append(
            None
            if nulls and i % 4 == 1
            else text
            if pa.types.is_string(t) or pa.types.is_large_string(t)
            else text.encode()
        )
    return out


def _column(
    u: int, n: int, t: pa.DataType, nulls: bool, chunks: int, width: int
) -> pa.ChunkedArray:
    """A unit's column in ``chunks`` chunks, the first one a slice of a larger array."""
    vals = _values(u, n, t, nulls, width)
    whole = (
        pa.array([b"pad", *vals], t)
        if t in (pa.binary(), pa.large_binary())
        else pa.array(["pad", *vals], t)
    )
    body = whole.slice(1)
    cuts = sorted({0, n, *np.linspace(0, n, chunks + 1).astype(int).tolist()})
    return pa.chunked_array([body.slice(a, b - a) for a, b in zip(cuts, cuts[1:])], t)


@settings(max_examples=40, deadline=None)
@given(
    t=st.sampled_from(TYPES),
    sizes=st.lists(st.integers(1, 30), min_size=1, max_size=4),
    picks=st.integers(1, 80),
    nulls=st.booleans(),
    chunks=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_take_wide_equals_arrows_take(
    t: pa.DataType, sizes: list[int], picks: int, nulls: bool, chunks: int, seed: int
) -> None:
    cols = {u: _column(u, n, t, nulls, chunks, 2 * WIDE) for u, n in enumerate(sizes)}
    rng = np.random.default_rng(seed)
    unit_ids = rng.integers(0, len(sizes), picks)
    rows = np.array([rng.integers(0, sizes[u]) for u in unit_ids], np.int64)
    got = take_wide(cols, unit_ids, rows)
    flat = {u: c.to_pylist() for u, c in cols.items()}
    want = [flat[u][r] for u, r in zip(unit_ids.tolist(), rows.tolist())]
    if got is None:  # only where nulls make the values narrow on average
        assert nulls
        return
    got.validate(full=True)
    assert got.type == t
    assert got.to_pylist() == want


def test_narrow_values_and_other_types_are_left_to_arrow() -> None:
    narrow = {0: _column(0, 10, pa.binary(), False, 1, 10)}
    assert take_wide(narrow, np.zeros(3, np.int64), np.arange(3)) is None
    numbers = {0: pa.chunked_array([pa.array(np.arange(10))])}
    assert take_wide(numbers, np.zeros(3, np.int64), np.arange(3)) is None


@pytest.mark.parametrize("nulls", [False, True])
def test_gather_of_wide_values_equals_the_narrow_path(nulls: bool) -> None:
    tables = {
        u: pa.table(
            {"id": np.arange(20) + 100 * u, "jpg": _column(u, 20, pa.binary(), nulls, 2, WIDE)}
        )
        for u in range(3)
    }
    unit_ids = np.array([2, 0, 1, 1, 0, 2, 2], np.int64)
    rows = np.array([3, 19, 0, 7, 5, 11, 3], np.int64)
    got = gather(tables, unit_ids, rows, {})
    whole = pa.concat_tables([tables[u] for u in range(3)])
    want = whole.take(pa.array(unit_ids * 20 + rows))
    assert got.equals(want.combine_chunks())
