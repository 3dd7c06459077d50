"""Which Arrow values cannot become Python objects: dates, timestamps and durations outside
the years 1-9999 (Python's ``datetime`` holds no other), at the top of a column or nested
in lists, structs, maps and dictionaries, and the text columns to check for UTF-8."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["holds_dates", "holds_text", "out_of_python_range", "python_bounds"]

# Python's datetime holds years 1..9999: the bounds in days and in seconds since 1970
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896
_MIN_SEC, _MAX_SEC = -62_135_596_800, 253_402_300_799
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}


def python_bounds(t: pa.DataType) -> tuple[int, int] | None:
    """The range of ``t``'s stored integers Python can represent (None: any, or not a date)."""
    if pa.types.is_date32(t):
        return _MIN_DAY, _MAX_DAY
    if pa.types.is_date64(t):
        return _MIN_SEC * 1000, _MAX_SEC * 1000
    if pa.types.is_timestamp(t) and t.unit in _PER_SECOND:
        return _MIN_SEC * _PER_SECOND[t.unit], _MAX_SEC * _PER_SECOND[t.unit]
    if pa.types.is_duration(t) and t.unit in _PER_SECOND:
        most = 999_999_999 * 86_400 * _PER_SECOND[t.unit]
        return -most, most
    return None


def _is_text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _holds(t: pa.DataType, kind: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``t`` is of ``kind``, or nests a type that is (in lists, structs, maps,
    dictionaries)."""
    if kind(t):
        return True
    if pa.types.is_dictionary(t):
        return _holds(t.value_type, kind)
    if pa.types.is_struct(t):
        return any(_holds(t.field(i).type, kind) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _holds(t.key_type, kind) or _holds(t.item_type, kind)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return _holds(t.value_type, kind)
    return False


def _leaves(col: pa.Array) -> Iterator[pa.Array]:
    """The arrays of values ``col`` holds that Python sees (none under a null parent)."""
    t = col.type
    if pa.types.is_dictionary(t):
        yield from _leaves(col.dictionary_decode())
    elif pa.types.is_struct(t):
        for child in col.flatten():  # with the struct's nulls
            yield from _leaves(child)
    elif pa.types.is_map(t):  # as the list of key-item structs it is
        entries = pa.list_(pa.struct([t.key_field, t.item_field]))
        yield from _leaves(pc.list_flatten(col.cast(entries)))
    elif pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        yield from _leaves(pc.list_flatten(col))
    elif python_bounds(t) is not None:
        yield col


def _out_of_range(col: pa.Array) -> bool:
    bounds = python_bounds(col.type)
    if bounds is None or col.null_count == len(col):
        return False
    limits = pc.min_max(col.cast(pa.int32() if pa.types.is_date32(col.type) else pa.int64()))
    lo, hi = limits["min"].as_py(), limits["max"].as_py()
    return bool(lo < bounds[0] or hi > bounds[1])


def holds_text(t: pa.DataType) -> bool:
    """Whether ``t`` is a string type or nests one."""
    return _holds(t, _is_text)


def holds_dates(t: pa.DataType) -> bool:
    """Whether ``t`` is a date, timestamp or duration Python's ``datetime`` bounds, or
    nests one."""
    return _holds(t, lambda x: python_bounds(x) is not None)


def out_of_python_range(col: pa.ChunkedArray | pa.Array) -> bool:
    """Whether ``col`` holds (or nests, where Python would see it) a date, timestamp or
    duration outside the years 1-9999."""
    if not holds_dates(col.type):
        return False
    chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
    return any(_out_of_range(leaf) for chunk in chunks for leaf in _leaves(chunk))
