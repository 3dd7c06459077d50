"""Per-sample dicts (``batch_format=None``): Python objects, column by column, with one
rule per type so every row of a column has the same kind of value:

- numbers and booleans: ``int``/``float``/``bool`` (``None`` for nulls);
- numeric lists (``list``, ``large_list`` and fixed-size): numpy rows of their own dtype,
  whatever their lengths (the DataLoader stacks rows of one length); a row holding a null
  among its numbers: float64 with NaN (that row alone); a null row: ``None``. A row's form never
  depends on the rows read beside it;
- dates and times: ``datetime.date``/``datetime``/``time``/``timedelta``; timestamps and
  durations in nanoseconds: ``numpy.datetime64``/``numpy.timedelta64`` in ``ns`` (exact,
  which ``datetime`` is not); times of day in nanoseconds: ``int`` nanoseconds;
- everything else (strings, binary, decimals, lists, structs, maps, dictionaries): what
  ``pyarrow``'s ``to_pylist`` gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import FormatError
from shardwise.loader.batches.convert import column_to_numpy, numeric

__all__ = ["rows"]


def rows(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """Per-sample dicts, by the rules in the module docstring."""
    names = batch.schema.names
    columns = [_python_values(name, col) for name, col in zip(names, batch.columns)]
    if not columns:  # records without fields: rows all the same, each an empty dict
        yield from ({} for _ in range(batch.num_rows))
        return
    for values in zip(*columns):
        yield dict(zip(names, values))


def _python_values(name: str, col: pa.Array) -> list[Any]:
    t = col.type
    try:
        if _numeric_list(t):
            if col.null_count or pc.list_flatten(col).null_count:
                return _rows_alone(col)
            return _plain_rows(col)
        if col.null_count == 0 and numeric(t):
            return col.to_numpy(zero_copy_only=False).tolist()
        if (pa.types.is_timestamp(t) or pa.types.is_duration(t)) and t.unit == "ns":
            return _nullable(col, list(col.to_numpy(zero_copy_only=False)))
        if pa.types.is_time64(t) and t.unit == "ns":
            return col.cast(pa.int64()).to_pylist()
        return col.to_pylist()
    except (ValueError, OverflowError, pa.ArrowException) as exc:
        raise FormatError(
            f"column {name!r} ({t}) has values that cannot become Python objects: {exc}"
        ) from exc


def _numeric_list(t: pa.DataType) -> bool:
    """A list of numbers: ``list``, ``large_list`` or fixed-size."""
    lists = pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)
    return lists and numeric(t.value_type)


def _plain_rows(col: pa.Array) -> list[np.ndarray]:
    """A list column of numbers without nulls as writable numpy rows (torch-safe rows the
    DataLoader stacks): rows of one length are views of one 2-D copy, the others each a
    copy of its own."""
    arr = column_to_numpy(col)
    if arr.dtype != object:  # fixed-size lists: a view of Arrow's memory
        return list(np.array(arr))
    if len(arr) and len({len(row) for row in arr}) == 1:
        return list(np.stack(list(arr)))
    return [np.array(row) for row in arr]


def _rows_alone(col: pa.Array) -> list[Any]:
    """Numeric lists with nulls (rows or numbers), each row a numpy row made of its own
    values: float64 with NaN where the row holds a null (as Arrow's ``to_numpy``), its
    own dtype otherwise, whatever the rows beside it in the batch; None for a null row.
    Booleans too: Arrow's ``to_numpy`` gives objects for booleans with nulls."""
    return [_row_values(row.values) if row.is_valid else None for row in col]


def _row_values(values: pa.Array) -> np.ndarray:
    if values.null_count and pa.types.is_boolean(values.type):
        values = values.cast(pa.float64())
    return np.array(values.to_numpy(zero_copy_only=False))


def _nullable(col: pa.Array, values: list[Any]) -> list[Any]:
    if not col.null_count:
        return values
    nulls = col.is_null().to_numpy(zero_copy_only=False)
    return [None if null else v for v, null in zip(values, nulls)]
