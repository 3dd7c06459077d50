"""Per-sample dicts (``batch_format=None``): Python objects, column by column, with one
rule per type so every row of a column has the same kind of value:

- numbers and booleans: ``int``/``float``/``bool`` (``None`` for nulls);
- numeric lists of one length per column chunk: numpy rows (the DataLoader stacks them);
  a row holding a null among its numbers: float64 with NaN (that row alone);
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
        if (
            col.null_count == 0
            and (pa.types.is_fixed_size_list(t) or pa.types.is_list(t))
            and numeric(t.value_type)
        ):
            if pc.list_flatten(col).null_count:
                return _rows_alone(col)
            arr = _equal_rows(col)
            return list(arr) if arr is not None else col.to_pylist()
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


def _equal_rows(col: pa.Array) -> np.ndarray | None:
    """A list column of numbers without nulls whose rows have one length as a 2-D array
    of its own (one writable copy: its rows are torch-safe numpy rows the DataLoader
    stacks); None where lengths differ."""
    arr = column_to_numpy(col)
    if arr.dtype != object:  # fixed-size lists: a view of Arrow's memory
        return np.array(arr)
    same = len(arr) > 0 and len({len(row) for row in arr}) == 1
    return np.stack(list(arr)) if same else None


def _rows_alone(col: pa.Array) -> list[Any]:
    """Numeric lists with nulls among their numbers, each row a numpy row made of its own
    values: float64 with NaN where the row holds a null (as Arrow's ``to_numpy``), its
    own dtype otherwise, whatever the rows beside it in the batch."""
    return [np.array(col[i].values.to_numpy(zero_copy_only=False)) for i in range(len(col))]


def _nullable(col: pa.Array, values: list[Any]) -> list[Any]:
    if not col.null_count:
        return values
    nulls = col.is_null().to_numpy(zero_copy_only=False)
    return [None if null else v for v, null in zip(values, nulls)]
