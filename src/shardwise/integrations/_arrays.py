"""Arrow columns as the per-sample CPU arrays a DALI external source accepts.

A batch source returns, per output, either one dense array whose first dimension is
the batch or a list of per-sample arrays of one dtype and rank. Binary and string
columns (every WebDataset field, ``__key__``) become ``uint8`` arrays, one per sample,
viewing the Arrow buffer (DALI copies them); a null (a sample without that field) is
an empty array. Numeric and boolean columns become one dense array; lists of numbers
one array per sample, fixed-size lists one dense 2-D array.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from shardwise._optional import require
from shardwise.errors import ConfigError

__all__ = ["column_arrays", "column_spec", "concat_outputs"]

_EMPTY = np.zeros(0, dtype=np.uint8)


def _is_bytes(t: pa.DataType) -> bool:
    return bool(
        pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
    )


def _is_number(t: pa.DataType) -> bool:
    return bool(pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t))


def _is_list(t: pa.DataType) -> bool:
    return bool(pa.types.is_list(t) or pa.types.is_large_list(t))


def column_spec(name: str, t: pa.DataType) -> tuple[np.dtype[Any], int]:
    """The numpy dtype and number of dimensions of one sample of column ``name``.

    Raises:
        ConfigError: the column's type has no array form (struct, map, nested lists...).
    """
    if _is_bytes(t):
        return np.dtype(np.uint8), 1
    if _is_number(t):
        return np.dtype(t.to_pandas_dtype()), 0
    if (_is_list(t) or pa.types.is_fixed_size_list(t)) and _is_number(t.value_type):
        return np.dtype(t.value_type.to_pandas_dtype()), 1
    raise ConfigError(
        f"column {name!r} of type {t} cannot be passed to DALI: choose binary, "
        "string, numeric or list-of-numeric columns with columns="
    )


def column_arrays(name: str, col: pa.Array) -> np.ndarray | list[np.ndarray]:
    """One batch of column ``name`` as DALI sample arrays (see the module docstring)."""
    t = col.type
    column_spec(name, t)  # refuses what has no array form, naming the column
    if _is_bytes(t):
        return _byte_samples(col)
    if _is_number(t):
        if col.null_count:
            raise ConfigError(
                f"column {name!r} has nulls in this batch; DALI needs a value per sample"
            )
        return col.to_numpy(zero_copy_only=False)
    if pa.types.is_fixed_size_list(t) and not col.null_count:
        flat = col.flatten().to_numpy(zero_copy_only=False)
        return flat.reshape(len(col), t.list_size)
    return [
        np.asarray(v, dtype=t.value_type.to_pandas_dtype())
        if v is not None
        else np.zeros(0, dtype=t.value_type.to_pandas_dtype())
        for v in col.to_pylist()
    ]


def _byte_samples(col: pa.Array) -> list[np.ndarray]:
    """Per-sample uint8 views of a binary or string array (no copy of the values)."""
    wide = pa.types.is_large_binary(col.type) or pa.types.is_large_string(col.type)
    _, offsets_buf, data_buf = col.buffers()
    n = len(col)
    offsets = np.frombuffer(offsets_buf, dtype=np.int64 if wide else np.int32)[
        col.offset : col.offset + n + 1
    ]
    data = np.frombuffer(data_buf, dtype=np.uint8) if data_buf is not None else _EMPTY
    valid = col.is_valid().to_numpy(zero_copy_only=False) if col.null_count else None
    return [
        data[offsets[i] : offsets[i + 1]] if valid is None or valid[i] else _EMPTY for i in range(n)
    ]


def concat_outputs(parts: list[Any]) -> Any:
    """Concatenate one output of every source along the batch (first) dimension."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.concatenate(parts)
    if all(type(p).__module__.startswith("torch") for p in parts):
        return require("torch").cat(parts)
    samples: list[np.ndarray] = []
    dense = True
    for p in parts:
        if hasattr(p, "as_cpu"):
            p = p.as_cpu()
        if hasattr(p, "is_dense_tensor"):
            dense = dense and bool(p.is_dense_tensor())
            samples.extend(np.array(t) for t in p)
        else:
            dense = False
            samples.extend(np.asarray(t) for t in p)
    if dense and samples and len({s.shape for s in samples}) == 1:
        return np.stack(samples)
    return samples
