"""Gathering a window's rows from several unit tables: exactly Arrow's take on the
concatenated units, whichever way each column goes (numpy for numbers and fixed-size
lists of numbers without nulls, Arrow for the rest)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.loader.batches.gather import Views, gather, unit_views

_EMB = pa.list_(pa.field("element", pa.float32()), 3)


def _unit(u: int, n: int, nulls: bool) -> pa.Table:
    ids = np.arange(n, dtype=np.int64) + 1000 * u
    emb = pa.FixedSizeListArray.from_arrays(
        pa.array((np.repeat(ids, 3) * 0.5).astype(np.float32)), type=_EMB
    )
    score = pa.array([None if nulls and i % 3 == 0 else float(i) for i in ids], type=pa.float64())
    return pa.table(
        {
            "id": ids,
            "emb": emb,
            "score": score,  # with nulls in some units: Arrow for every unit
            "small": pa.array(ids % 7, type=pa.int8()),
            "text": [f"u{u}-{i}" * (i % 4) for i in ids.tolist()],
            "flag": pa.array(ids % 2 == 0),  # booleans are bit-packed: Arrow
        }
    )


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=6),
    picks=st.integers(1, 120),
    nulls=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_gather_equals_take_on_the_concatenated_units(
    sizes: list[int], picks: int, nulls: bool, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    tables = {
        u * 3: _unit(u, n, nulls and u % 2 == 1).combine_chunks() for u, n in enumerate(sizes)
    }
    units = np.array(sorted(tables), dtype=np.int64)
    unit_ids = rng.choice(units, picks)
    rows = np.array([rng.integers(tables[int(u)].num_rows) for u in unit_ids], dtype=np.int64)
    views: Views = {}
    got = gather(tables, unit_ids, rows, views)
    starts = dict(
        zip(units.tolist(), np.cumsum([0] + [tables[int(u)].num_rows for u in units])[:-1].tolist())
    )
    everything = pa.concat_tables([tables[int(u)] for u in units])
    expected = everything.take(pa.array([starts[int(u)] + r for u, r in zip(unit_ids, rows)]))
    assert got.schema == expected.schema
    assert got.equals(expected)
    # numbers and fixed-size lists of numbers went through numpy, and the views were reused
    if len(set(unit_ids.tolist())) > 1:
        assert all(
            views[(int(u), 0)] is not None and views[(int(u), 1)] is not None
            for u in set(unit_ids.tolist())
        )
        assert all(
            views[(int(u), 4)] is None and views[(int(u), 5)] is None
            for u in set(unit_ids.tolist())
        )
    again = gather(tables, unit_ids, rows, views)
    assert again.equals(expected)


def test_unit_views_are_numbers_only() -> None:
    tables = {0: _unit(0, 12, nulls=False).combine_chunks()}
    views = unit_views(tables, 0)
    for i, f in enumerate(tables[0].schema):
        view = views[(0, i)]
        assert (view is None) == (
            not (
                pa.types.is_integer(f.type)
                or pa.types.is_floating(f.type)
                or pa.types.is_fixed_size_list(f.type)
            )
        ), f
