"""Gathering rows of a window's unit tables into one table, in plan order.

A piece of a window takes a few hundred rows from each of up to ``interleave`` units,
interleaved. Arrow has no fast take across tables (a take on a chunked array first
concatenates the chunks), so rows are taken per unit and then put in order: for
string and other variable-width columns with Arrow's ``take`` (a take per unit, then a
second take to restore the order); for numeric columns and fixed-size lists of numbers
without nulls -- ids, labels, embeddings, token windows -- with numpy's ``take`` (each
unit's rows copied into a small scratch buffer that stays in cache, then scattered to
their places in the piece), and one copy when all rows come from one unit; for wide
binary and string values (4 KiB or more on average: images, audio) value by value, one
copy each (:mod:`shardwise.loader.batches.wide`).

:func:`gather_columns` hands the numeric columns out as the numpy arrays the rows were
copied into (owned and writable: the in-process loader's batches are views of them);
:func:`gather` makes one Arrow table of everything.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.convert import buffer_view
from shardwise.loader.batches.wide import take_wide

__all__ = [
    "Columns",
    "Views",
    "column_to_arrow",
    "fieldless_batch",
    "gather",
    "gather_columns",
    "unit_views",
]

Views = dict[
    tuple[int, int], "np.ndarray | None"
]  # (unit, column) -> numpy view, or None: use Arrow
Columns = list[
    "np.ndarray | pa.ChunkedArray | pa.Array"
]  # one per schema field: gathered by numpy, by Arrow, or value by value (wide values)


def gather(
    tables: dict[int, pa.Table], unit_ids: np.ndarray, rows: np.ndarray, views: Views
) -> pa.Table:
    """Rows ``rows[i]`` of units ``unit_ids[i]``, in that order, as one contiguous table.

    ``views`` caches the numpy views of the unit tables' columns; keep one per window.
    """
    schema = tables[int(unit_ids[0])].schema
    columns = gather_columns(tables, unit_ids, rows, views)
    arrays = [
        column_to_arrow(c, f.type) if isinstance(c, np.ndarray) else c
        for c, f in zip(columns, schema)
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def gather_columns(
    tables: dict[int, pa.Table],
    unit_ids: np.ndarray,
    rows: np.ndarray,
    views: Views,
    skip: frozenset[int] = frozenset(),
) -> Columns:
    """The gathered rows column by column (see :func:`gather`): numbers and fixed-size
    lists of numbers without nulls as new numpy arrays (2-D for lists), the rest as Arrow;
    the columns in ``skip`` are not gathered (left empty, for the caller to fill)."""
    order = np.argsort(unit_ids, kind="stable")
    grouped = unit_ids[order]
    cuts = (np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist()
    bounds = list(zip([0, *cuts], [*cuts, len(order)]))
    groups = [
        (int(grouped[a]), rows[order[a:b]]) for a, b in bounds
    ]  # (unit, its rows in piece order)
    schema = tables[groups[0][0]].schema
    columns: Columns = []
    by_arrow: list[int] = []
    for i, f in enumerate(schema):
        if i in skip:
            columns.append(pa.chunked_array([], type=f.type))
            continue
        arrays = [a for a in (_view(views, tables, u, i) for u, _ in groups) if a is not None]
        wide = None if arrays else take_wide({u: tables[u][i] for u, _ in groups}, unit_ids, rows)
        if len(arrays) == len(groups):
            columns.append(_take_numeric(arrays, groups, bounds, order, len(rows)))
        elif wide is not None:  # images and other wide values: one copy (see wide.py)
            columns.append(wide)
        else:
            columns.append(pa.chunked_array([], type=f.type))  # filled below
            by_arrow.append(i)
    if by_arrow:
        parts = [tables[u].select(by_arrow).take(_indices(picked)) for u, picked in groups]
        taken = pa.concat_tables(parts).combine_chunks()
        if len(groups) > 1:  # rows grouped by unit are put back in piece order
            back = np.empty(len(order), dtype=np.int64)
            back[order] = np.arange(len(order))
            taken = taken.take(_indices(back))
        for j, i in enumerate(by_arrow):
            columns[i] = taken.column(j)
    return columns


def _take_numeric(
    arrays: list[np.ndarray],
    groups: list[tuple[int, np.ndarray]],
    bounds: list[tuple[int, int]],
    order: np.ndarray,
    n: int,
) -> np.ndarray:
    """Rows of several units' numpy views into one new array in piece order: each unit's
    rows taken into a small scratch buffer (cache-resident) and scattered to their places,
    instead of a whole piece in unit order taken again into piece order."""
    out = np.empty((n, *arrays[0].shape[1:]), dtype=arrays[0].dtype)
    if len(groups) == 1:
        np.take(arrays[0], groups[0][1], axis=0, out=out, mode="clip")  # "raise" buffers `out`
        return out
    scratch = np.empty((max(b - a for a, b in bounds), *out.shape[1:]), dtype=out.dtype)
    for (a, b), (_, picked), src in zip(bounds, groups, arrays):
        part = scratch[: b - a]
        np.take(src, picked, axis=0, out=part, mode="clip")
        out[order[a:b]] = part
    return out


def _indices(rows: np.ndarray) -> pa.Array:
    """Row numbers as an Arrow int64 array, made from their buffer (``pa.array`` would
    import pandas on its first call)."""
    data = np.ascontiguousarray(rows, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(data), [None, pa.py_buffer(data)])


def _view(views: Views, tables: dict[int, pa.Table], unit: int, column: int) -> np.ndarray | None:
    key = (unit, column)
    if key not in views:
        views[key] = _numeric_view(tables[unit].column(column))
    return views[key]


def unit_views(tables: dict[int, pa.Table], unit: int) -> Views:
    """The numpy arrays :func:`gather_columns` takes the rows of ``unit`` from, computed
    ahead (e.g. on the thread that read the unit): zero-copy views of its numeric
    columns (None for the others)."""
    views: Views = {}
    for i in range(tables[unit].num_columns):
        _view(views, tables, unit, i)
    return views


def _numeric_view(col: pa.ChunkedArray) -> np.ndarray | None:
    """A zero-copy numpy view of a numeric or fixed-size-list-of-numbers column without
    nulls (2-D for lists), or None."""
    if col.num_chunks != 1 or col.null_count:
        return None
    arr = col.chunk(0)
    t = arr.type
    if _numeric(t):
        return buffer_view(arr)
    if pa.types.is_fixed_size_list(t) and _numeric(t.value_type):
        values = arr.flatten()
        if values.null_count:
            return None
        flat = buffer_view(values)
        return None if flat is None else flat.reshape(len(arr), t.list_size)
    return None


def _numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def column_to_arrow(values: np.ndarray, t: pa.DataType) -> pa.Array:
    """A column gathered by numpy as an Arrow array of type ``t`` (no copy)."""
    if pa.types.is_fixed_size_list(t):
        return pa.FixedSizeListArray.from_arrays(
            pa.array(values.reshape(-1), type=t.value_type), type=t
        )
    return pa.array(values, type=t)


def fieldless_batch(rows: int, schema: pa.Schema) -> pa.RecordBatch:
    """A record batch of ``rows`` rows and no columns (records without fields, such as
    JSON lines ``{}``, are rows all the same), with ``schema``'s metadata;
    ``pa.record_batch([])`` has no rows, and a pickled one loses them."""
    empty = pa.StructArray.from_buffers(pa.struct([]), rows, [None], children=[])
    return pa.RecordBatch.from_struct_array(empty).replace_schema_metadata(schema.metadata)
