"""Gathering rows of a window's unit tables into one table, in plan order.

A piece of a window takes a few hundred rows from each of up to ``interleave`` units,
interleaved. Arrow has no fast take across tables (a take on a chunked array first
concatenates the chunks), so rows are taken per unit and then put in order: for
string and other variable-width columns with Arrow's ``take`` (a take per unit, then a
second take to restore the order); for numeric columns and fixed-size lists of numbers
without nulls -- ids, labels, embeddings, token windows -- with numpy's ``take`` (row
copies into one buffer, then into order), two copies instead of three.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

__all__ = ["Views", "gather"]

Views = dict[tuple[int, int], "np.ndarray | None"]  # (unit, column) -> numpy view, or None: use Arrow


def gather(tables: dict[int, pa.Table], unit_ids: np.ndarray, rows: np.ndarray, views: Views) -> pa.Table:
    """Rows ``rows[i]`` of units ``unit_ids[i]``, in that order, as one contiguous table.

    ``views`` caches the numpy views of the unit tables' columns; keep one per window.
    """
    first = int(unit_ids[0])
    if (unit_ids == first).all():
        return tables[first].take(pa.array(rows, type=pa.int64()))
    order = np.argsort(unit_ids, kind="stable")
    grouped = unit_ids[order]
    cuts = (np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist()
    bounds = list(zip([0, *cuts], [*cuts, len(order)]))
    groups = [(int(grouped[a]), rows[order[a:b]]) for a, b in bounds]  # (unit, its rows in piece order)
    back = np.empty(len(order), dtype=np.int64)
    back[order] = np.arange(len(order))
    schema = tables[first].schema
    columns: list[pa.Array | pa.ChunkedArray | None] = []
    by_arrow: list[int] = []
    for i, field in enumerate(schema):
        sources = [_view(views, tables, u, i) for u, _ in groups]
        arrays = [s for s in sources if s is not None]
        if len(arrays) < len(sources):
            columns.append(None)
            by_arrow.append(i)
            continue
        by_unit = np.empty((len(rows), *arrays[0].shape[1:]), dtype=arrays[0].dtype)
        for (a, b), (_, picked), src in zip(bounds, groups, arrays):
            np.take(src, picked, axis=0, out=by_unit[a:b])
        columns.append(_to_arrow(np.take(by_unit, back, axis=0), field.type))
    if by_arrow:
        parts = [tables[u].select(by_arrow).take(pa.array(picked, type=pa.int64())) for u, picked in groups]
        taken = pa.concat_tables(parts).combine_chunks().take(pa.array(back))
        if len(by_arrow) == len(columns):
            return taken
        for j, i in enumerate(by_arrow):
            columns[i] = taken.column(j)
    return pa.Table.from_arrays(columns, schema=schema)


def _view(views: Views, tables: dict[int, pa.Table], unit: int, column: int) -> np.ndarray | None:
    key = (unit, column)
    if key not in views:
        views[key] = _numeric_view(tables[unit].column(column))
    return views[key]


def _numeric_view(col: pa.ChunkedArray) -> np.ndarray | None:
    """A zero-copy numpy view of a numeric or fixed-size-list-of-numbers column without
    nulls (2-D for lists), or None."""
    if col.num_chunks != 1 or col.null_count:
        return None
    arr = col.chunk(0)
    t = arr.type
    if _numeric(t):
        return arr.to_numpy()
    if pa.types.is_fixed_size_list(t) and _numeric(t.value_type):
        values = arr.flatten()
        if values.null_count:
            return None
        return values.to_numpy().reshape(len(arr), t.list_size)
    return None


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _to_arrow(values: np.ndarray, t: pa.DataType) -> pa.Array:
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(pa.array(values.reshape(-1), type=t.value_type), type=t)
    return pa.array(values, type=t)
