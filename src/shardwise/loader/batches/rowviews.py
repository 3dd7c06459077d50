"""A piece's variable-length lists of numbers (token ids) as views of their units' values.

A numpy or torch batch gives such a column (unpadded, of rows of different lengths) as an
array of objects, each row a read-only numpy view of its values (see
:func:`~shardwise.loader.batches.convert.column_to_numpy`). Gathered by Arrow, a piece's
rows were first copied three times: a ``take`` per unit, their concatenation, and a
``take`` back into plan order, all into memory new to a fresh process (on the token
shape, about three times the column's decoded bytes of page faults before the first
batch). The rows' views are the same made straight from each unit's decoded values: the
piece then copies no value at all, and its batches' rows keep their unit's buffer alive
instead of the piece's (the unit stays in memory until the last batch with one of its
rows is let go, as the piece's buffer did).

Columns with nulls or of other types are gathered as before.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.convert import _list_offsets, buffer_view

__all__ = ["list_row_views", "viewable"]


def viewable(t: pa.DataType) -> bool:
    """Whether a column of type ``t`` is a variable-length list of integers or floats."""
    if not (pa.types.is_list(t) or pa.types.is_large_list(t)):
        return False
    v = t.value_type
    return pa.types.is_integer(v) or pa.types.is_floating(v)


def _unit_values(table: pa.Table, column: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A unit's list column as (offsets, values) numpy views; None with nulls or chunks."""
    col = table.column(column)
    if col.num_chunks != 1 or col.null_count:
        return None
    arr = col.chunk(0)
    flat = buffer_view(arr.values)
    if flat is None:
        return None
    return _list_offsets(arr), flat


def list_row_views(
    tables: dict[int, pa.Table], unit_ids: np.ndarray, rows: np.ndarray, column: int
) -> np.ndarray | None:
    """Rows ``rows[i]`` of units ``unit_ids[i]`` of list column ``column``, in that order,
    as an array of objects, each a read-only view of its unit's values (also where all
    rows have one length: the column's form follows from its type alone); None where they
    must be gathered (nulls, several chunks, no rows)."""
    n = len(rows)
    if not n:
        return None
    starts = np.empty(n, dtype=np.int64)
    ends = np.empty(n, dtype=np.int64)
    values: dict[int, np.ndarray] = {}
    order = np.argsort(unit_ids, kind="stable")
    grouped = unit_ids[order]
    cuts = (np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist()
    for a, b in zip([0, *cuts], [*cuts, n]):
        u = int(grouped[a])
        got = _unit_values(tables[u], column)
        if got is None:
            return None
        offsets, values[u] = got
        at = order[a:b]
        picked = rows[at]
        starts[at] = offsets[picked]
        ends[at] = offsets[picked + 1]
    out = np.empty(n, dtype=object)
    for i, (u, a, b) in enumerate(zip(unit_ids.tolist(), starts.tolist(), ends.tolist())):
        out[i] = values[u][a:b]
    return out
