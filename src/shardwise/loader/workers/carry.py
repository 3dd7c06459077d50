"""Variable-width values (strings, binary) as parts of a worker's shared-memory ring, and
back: the carriage of text columns for every batch format (see
:mod:`shardwise.loader.workers.transport` for the numpy and torch batches,
:mod:`shardwise.loader.workers.carriers` for Arrow batches and per-sample dicts).

A column travels as its validity bitmap (only when it has nulls), its offsets from 0 and
its bytes, each part at an aligned place of the batch's region, described by a spec
``("x", form, type, length, has_validity, data_bytes)``. Arrow arrays give their own
buffers (a slice starts its offsets at 0 again; 32-bit offsets stay 32-bit); Python
``bytes`` are written into the ring object by object (one copy, nothing joined first);
Python strings are encoded into an Arrow array first. In the training process the parts
are copied out of the ring (which the worker reuses) into what ``form`` names: an Arrow
array of the column's own type (``"arrow"``), Python objects in a :class:`NumpyColumn`
(``"numpy"``), in a plain numpy object array (``"objects"``), in a list (``"list"``), or
the one value of a one-row column (``"value"``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.numpy_column import NumpyColumn
from shardwise.loader.workers.ring import aligned

__all__ = ["Layout", "Part", "arrow_layout", "carried", "objects_layout", "rebuild_text"]

Part = np.ndarray | list[np.ndarray]  # a list is written back to back, as one part
Layout = tuple[tuple[Any, ...], list[Part]]  # a spec (without the column's name), its parts

_WIDE = {pa.large_string(), pa.large_binary()}
_TYPES = {pa.string(), pa.binary(), *_WIDE}


def carried(t: pa.DataType) -> bool:
    """Whether columns of type ``t`` travel as offsets and bytes (views and others do not)."""
    return t in _TYPES


def arrow_layout(arr: pa.Array, form: str) -> Layout | None:
    """A string or binary Arrow array (any slice, nulls) as ring parts; None for others."""
    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    if not carried(arr.type):
        return None
    n = len(arr)
    width = np.dtype(np.int64 if arr.type in _WIDE else np.int32)
    _, offsets_buf, data_buf = arr.buffers()
    if offsets_buf is None or n == 0:
        offsets = np.zeros(n + 1, dtype=width)
    else:
        offsets = np.frombuffer(offsets_buf, width, n + 1, arr.offset * width.itemsize)
    first, last = int(offsets[0]), int(offsets[-1])
    data = np.empty(0, np.uint8)
    if data_buf is not None and last > first:
        data = np.frombuffer(data_buf, np.uint8, last - first, first)
    valid = _validity(arr)
    parts: list[Part] = [offsets - first if first else offsets, data]
    spec = ("x", form, arr.type, n, valid is not None, data.nbytes)
    return spec, parts if valid is None else [valid, *parts]


def _validity(arr: pa.Array) -> np.ndarray | None:
    """The validity bitmap of ``arr``'s own rows (from bit 0), or None without nulls."""
    if not arr.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(arr.buffers()[0], np.uint8), bitorder="little")
    return np.packbits(bits[arr.offset : arr.offset + len(arr)], bitorder="little")


def objects_layout(
    values: Sequence[Any] | np.ndarray, form: str, encode: Callable[[Any], Any] | None = None
) -> Layout | None:
    """Python ``bytes`` (or ``None``) as ring parts, written object by object; Python
    strings (or ``None``) through ``encode`` (strings to an Arrow array, None if it cannot);
    None for anything else."""
    kinds = {type(v) for v in values} - {type(None)}
    if kinds == {str} and encode is not None:
        got = encode(values)
        return arrow_layout(got, form) if got is not None else None
    if kinds - {bytes}:
        return None
    lengths = np.fromiter((0 if v is None else len(v) for v in values), np.int64, len(values))
    offsets = np.zeros(len(values) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = [np.frombuffer(v, np.uint8) for v in values if v]
    nulls = [v is None for v in values]
    valid = np.packbits(~np.array(nulls, bool), bitorder="little") if any(nulls) else None
    spec = ("x", form, pa.large_binary(), len(values), valid is not None, int(offsets[-1]))
    return spec, [offsets, data] if valid is None else [valid, offsets, data]


def encode_strings(values: Sequence[Any]) -> pa.Array | None:
    """Python strings (or None) as a ``large_string`` array; None if one cannot be encoded."""
    try:
        return pa.array(list(values), pa.large_string())
    except (pa.ArrowException, UnicodeError, TypeError):
        return None


def rebuild_text(region: np.ndarray, off: int, spec: tuple[Any, ...]) -> tuple[Any, int]:
    """The column ``spec`` describes, whose parts start at ``off`` of ``region`` (copied
    out), and where the next column's parts start."""
    form, t, n, has_valid, data_bytes = spec
    valid = None
    if has_valid:
        valid, off = _take(region, off, (n + 7) // 8)
    width = 8 if t in _WIDE else 4
    offsets, off = _take(region, off, (n + 1) * width)
    data, off = _take(region, off, data_bytes)
    if form == "arrow":  # the column's own memory, in its own type
        bufs = [None if valid is None else pa.py_buffer(valid.copy()), *_owned(offsets, data)]
        return pa.Array.from_buffers(t, n, bufs), off
    wide = pa.large_binary() if t in (pa.binary(), pa.large_binary()) else pa.large_string()
    if width == 4:
        offsets = np.frombuffer(offsets, np.int32).astype(np.int64).view(np.uint8)
    bufs = [None if valid is None else pa.py_buffer(valid), pa.py_buffer(offsets)]
    values = pa.Array.from_buffers(wide, n, [*bufs, pa.py_buffer(data)]).to_pylist()
    return _formed(values, form), off


def _take(region: np.ndarray, off: int, n: int) -> tuple[np.ndarray, int]:
    return region[off : off + n], off + aligned(n)


def _owned(offsets: np.ndarray, data: np.ndarray) -> list[pa.Buffer]:
    return [pa.py_buffer(offsets.copy()), pa.py_buffer(data.copy())]


def _formed(values: list[Any], form: str) -> Any:
    """Python objects of a column in the container ``form`` names."""
    if form == "list":
        return values
    if form == "value":
        return values[0]
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.view(NumpyColumn) if form == "numpy" else out
