"""Arrow columns to numpy arrays for ``"numpy"`` and ``"torch"`` batches.

Numeric columns become arrays without copies where Arrow allows, dates and timestamps
``datetime64``, durations and times of day (the time since midnight) ``timedelta64``
in the column's unit, fixed-size numeric
lists 2-D arrays, and variable-length numeric lists (token ids) arrays of row views, or,
when ``pad_to`` is set, 2-D arrays padded to the batch's longest row or to ``pad_to``,
with a ``<column>_lengths`` int64 column. A column's form follows from its type and the
options alone: never from the values of a batch.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError, UnsupportedError
from shardwise.loader.batches.texts import batch_objects

__all__ = [
    "Padding",
    "buffer_view",
    "check_padding",
    "column_to_numpy",
    "is_ragged",
    "numeric",
    "pad",
    "to_numpy",
    "torch_other",
]

Padding = int | str | None  # None, "longest", or a fixed length


def check_padding(pad_to: Padding) -> Padding:
    """Validate ``pad_to`` once, at the public edge."""
    if (
        pad_to is None
        or pad_to == "longest"
        or (isinstance(pad_to, int) and pad_to >= 1 and not isinstance(pad_to, bool))
    ):
        return pad_to
    raise ConfigError(f"pad_to must be None, 'longest' or a length >= 1, got {pad_to!r}")


def is_ragged(t: pa.DataType) -> bool:
    """A list type of numbers whose rows may differ in length (padded under ``pad_to``)."""
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and numeric(t.value_type)


def pad(col: pa.Array, pad_to: Padding) -> tuple[np.ndarray, np.ndarray]:
    """A list-of-numbers column as a 2-D array padded with zeros, to its longest row or
    to ``pad_to`` (longer rows are cut there), and each row's length in it. Null rows are
    empty; null values inside a row are zeros (False in lists of booleans)."""
    n = len(col)
    lengths = (
        pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    )
    width = int(lengths.max(initial=0)) if pad_to == "longest" else int(pad_to or 0)
    kept = np.minimum(lengths, width)
    zero = False if pa.types.is_boolean(col.type.value_type) else 0
    flat = pc.fill_null(pc.list_flatten(col), zero).to_numpy(zero_copy_only=False)
    out = np.zeros((n, width), dtype=_numpy_type(col.type.value_type))
    row = np.repeat(np.arange(n), kept)
    pos = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    out[row, pos] = flat[np.repeat(np.cumsum(lengths) - lengths, kept) + pos]
    return out, kept


def _numpy_type(t: pa.DataType) -> np.dtype[Any]:
    return np.dtype(t.to_pandas_dtype())


def column_to_numpy(col: pa.Array) -> np.ndarray:
    """Numeric columns zero-copy where Arrow allows; fixed-size lists of numbers become
    2-D arrays (embeddings, token windows) instead of arrays of objects; variable-length
    lists of numbers without nulls an array of read-only row views, as Arrow's
    ``to_numpy`` gives them (made here without its first call's import of pandas), even
    where a batch's rows happen to have one length: what a column becomes depends on its
    type alone, never on its values (``pad_to`` makes such lists 2-D, see :func:`pad`)."""
    t = col.type
    if pa.types.is_time(t):  # numpy has no time of day: the time since midnight
        return _time_since_midnight(col)
    if pa.types.is_fixed_size_list(t) and col.null_count == 0 and numeric(t.value_type):
        values = col.flatten()
        flat = buffer_view(values)
        if flat is None:
            flat = values.to_numpy(zero_copy_only=False)
        return flat.reshape(len(col), t.list_size)
    if (
        (pa.types.is_list(t) or pa.types.is_large_list(t))
        and col.null_count == 0
        and numeric(t.value_type)
    ):
        flat = buffer_view(col.values)
        if flat is not None:
            return _row_views(flat, _list_offsets(col))
    if pa.types.is_struct(t):  # as numpy batches of the training process make them
        return batch_objects(col)  # (structs stay Arrow there until each batch is cut)
    try:
        return col.to_numpy(zero_copy_only=False)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return _rows_one_by_one(col)


def _time_since_midnight(col: pa.Array) -> np.ndarray:
    """A time-of-day column as ``timedelta64`` in its unit, as a duration column comes
    (NaT for nulls): the unit stays with the values, which bare counts lost."""
    counts = col.cast(pa.int32()).cast(pa.int64()) if pa.types.is_time32(col.type) else col
    return counts.view(pa.duration(col.type.unit)).to_numpy(zero_copy_only=False)


def _rows_one_by_one(col: pa.Array) -> np.ndarray:
    """What Arrow's ``to_numpy`` cannot make of a list column (lists of times of day in
    nanoseconds, of fixed-size binary, ...): each row as this module makes a column of its
    values, in an array of objects (None for a null row).

    Raises:
        UnsupportedError: a column of another type numpy batches cannot hold.
    """
    t = col.type
    if not (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t)):
        raise UnsupportedError(
            f"a column of {t} cannot be given as numpy arrays; batch_format='arrow' gives it"
        )
    out = np.empty(len(col), dtype=object)
    for i in range(len(col)):
        row = col[i]
        out[i] = column_to_numpy(row.values) if row.is_valid else None
    return out


def buffer_view(arr: pa.Array) -> np.ndarray | None:
    """Integers or floats without nulls as a read-only numpy view of their data buffer
    (what ``arr.to_numpy()`` gives, without its first call's import of pandas: about 0.3
    CPU s of a fresh process, on the path to its first batch); None for other arrays."""
    t = arr.type
    if arr.null_count or not (pa.types.is_integer(t) or pa.types.is_floating(t)):
        return None
    kind = "f" if pa.types.is_floating(t) else "i" if pa.types.is_signed_integer(t) else "u"
    dtype = np.dtype(f"{kind}{t.bit_width // 8}")
    data = arr.buffers()[1]
    if data is None or not len(arr):
        return np.empty(0, dtype=dtype)
    view = np.frombuffer(data, dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    view.flags.writeable = False  # Arrow's memory, as to_numpy gives it
    return view


def _list_offsets(col: pa.Array) -> np.ndarray:
    """The offsets of a list column's rows into its values (``len(col) + 1`` of them)."""
    dtype = np.dtype(np.int64 if pa.types.is_large_list(col.type) else np.int32)
    return np.frombuffer(
        col.buffers()[1], dtype=dtype, count=len(col) + 1, offset=col.offset * dtype.itemsize
    )


def _row_views(flat: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Each row's values as a view of ``flat``, in an array of objects."""
    out = np.empty(len(offsets) - 1, dtype=object)
    for i, (a, b) in enumerate(zip(offsets[:-1].tolist(), offsets[1:].tolist())):
        out[i] = flat[a:b]
    return out


def numeric(t: pa.DataType) -> bool:
    return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_boolean(t)


def to_numpy(batch: pa.RecordBatch, writable: bool = True) -> dict[str, np.ndarray]:
    """Each column as a numpy array (see :func:`column_to_numpy`)."""
    # Arrow buffers are read-only; arrays handed out (and tensors made from them by a
    # DataLoader's collate) must own writable memory, so zero-copy views are copied once
    return {
        name: np.require(column_to_numpy(col), requirements="W")
        if writable
        else column_to_numpy(col)
        for name, col in zip(batch.schema.names, batch.columns)
    }


def torch_other(values: np.ndarray) -> Any:
    """A column of a torch batch that is not a tensor: Python objects (strings, binary,
    lists, ...) stay a numpy object array (torch's ``default_convert`` passes it as it
    is; a list it would walk element by element); dates and durations, which a tensor
    cannot hold, become a list of their Python values."""
    return values if values.dtype == object else values.tolist()
