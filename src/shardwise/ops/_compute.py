"""Arrow compute kernels called by name, without importing ``pyarrow.compute``.

Importing ``pyarrow.compute`` builds a Python wrapper, with its parsed docstring, for
every one of Arrow's kernels: about 40 ms of CPU, paid again by every fresh worker
process before its first task. The modules on the path of a pipeline's tasks that only
read, dedup and write (the task runner, the dedup's normalisation, the column helpers)
call their few kernels here instead, through the function those wrappers call
(``pyarrow.compute.call_function``), with the same options, so the results are the same.
Operators that use many kernels (``shardwise.ops.text``) import ``pyarrow.compute``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.errors import ConfigError, FormatError

try:  # the module pyarrow.compute's wrappers are generated from
    from pyarrow._compute import Utf8NormalizeOptions
    from pyarrow._compute import call_function as _call
except ImportError:  # pragma: no cover - a pyarrow without it: the public (heavier) module
    from pyarrow.compute import Utf8NormalizeOptions
    from pyarrow.compute import call_function as _call

__all__ = [
    "bool_array",
    "call",
    "count_true",
    "fill_null",
    "filter_rows",
    "int64_array",
    "text_column",
    "utf8_normalize",
]


def call(name: str, *args: Any, options: Any = None) -> Any:
    """Arrow kernel ``name`` on ``args`` (as ``pyarrow.compute.<name>(*args)``)."""
    return _call(name, list(args), options)


def fill_null(values: Any, fill: Any) -> Any:
    """``pyarrow.compute.fill_null``: nulls of ``values`` replaced by ``fill``."""
    if not isinstance(fill, (pa.Array, pa.ChunkedArray, pa.Scalar)):
        fill = pa.scalar(fill, type=values.type)
    return _call("coalesce", [values, fill], None)


def count_true(mask: Any) -> int:
    """How many entries of a boolean array are true (``pyarrow.compute.sum``, nulls and
    an empty array counting 0)."""
    return int(_call("sum", [mask], None).as_py() or 0)


def filter_rows(data: Any, mask: Any) -> Any:
    """``data.filter(mask)`` (an array, record batch or table; null mask entries drop)."""
    return _call("filter", [data, mask], None)


def bool_array(mask: Any) -> pa.Array:
    """``pa.array(mask)`` of a boolean numpy array, from its packed bits (see
    :func:`int64_array`)."""
    bits = np.packbits(np.asarray(mask, dtype=bool), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def int64_array(values: Any) -> pa.Array:
    """``pa.array(values)`` of an int64 numpy array, from its buffer (``pa.array`` of a
    numpy array imports ``numpy.ma`` on its first call, ~20 ms)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


def text_column(batch: pa.RecordBatch, column: str) -> pa.Array:
    """The text column ``column`` of ``batch`` (a binary one cast to text).

    Raises:
        ConfigError: no such column, or one that is neither text nor binary.
    """
    if column not in batch.schema.names:
        raise ConfigError(f"no column {column!r}; columns are {batch.schema.names}")
    col = batch.column(column)
    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)):
        if pa.types.is_binary(col.type) or pa.types.is_large_binary(col.type):
            col = _as_text(col, column)
        else:
            raise ConfigError(f"column {column!r} is {col.type}, not text")
    return col


def _as_text(col: Any, column: str) -> Any:
    """A binary column as text; bytes that are not UTF-8 are a ``FormatError``."""
    try:
        return col.cast(pa.string())
    except pa.ArrowInvalid as e:
        raise FormatError(
            f"column {column!r} is binary and not all of it is UTF-8 text ({e}): decode it "
            "first (a map with errors='replace', say) or filter those rows out"
        ) from e


def utf8_normalize(values: Any, form: str) -> Any:
    """``pyarrow.compute.utf8_normalize``: Unicode normalisation form ``form``."""
    return _call("utf8_normalize", [values], Utf8NormalizeOptions(form))
