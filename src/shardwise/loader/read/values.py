"""What a unit's values must be before the loader hands them on: checked and normalised
as the unit is read.

A date or timestamp outside the years 1-9999 cannot be a ``datetime``, nor can bytes that
are not UTF-8 be a ``str`` (in per-sample values and numpy or torch batches alike): each
is a :class:`FormatError` naming the file, the unit and the column (see
:func:`check_values`). String and binary *view* columns become ``large_string`` and
``large_binary`` (:func:`without_views`), the types the loader's gathers can take.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import FormatError
from shardwise.formats import Unit

__all__ = ["check_values", "without_views"]

# Python's datetime holds years 1..9999: the bounds in days and in seconds since 1970
_MIN_DAY, _MAX_DAY = -719_162, 2_932_896
_MIN_SEC, _MAX_SEC = -62_135_596_800, 253_402_300_799
_PER_SECOND = {"s": 1, "ms": 1_000, "us": 1_000_000}


def check_values(table: pa.Table, unit: Unit, where: str, *, dates: bool = True) -> None:
    """Refuse a unit whose values cannot be Python objects, naming the file, the unit
    (``where``) and the column: strings that are not UTF-8 (Parquet readers do not check
    it, and a damaged file can hold such bytes) and, with ``dates``, dates, timestamps or
    durations outside the years 1-9999."""
    for name, col in zip(table.column_names, table.columns):
        if pa.types.is_string(col.type) or pa.types.is_large_string(col.type):
            try:
                col.validate(full=True)  # about 20 ms per GB of text
            except pa.ArrowInvalid as exc:
                raise FormatError(
                    f"column {name!r} ({col.type}) holds bytes that are not UTF-8 text ({exc})",
                    unit.path,
                    where,
                ) from exc
        bounds = _python_bounds(col.type) if dates else None
        if bounds is None or col.null_count == len(col):
            continue
        limits = pc.min_max(col.cast(pa.int32() if pa.types.is_date32(col.type) else pa.int64()))
        lo, hi = limits["min"].as_py(), limits["max"].as_py()
        if lo < bounds[0] or hi > bounds[1]:
            raise FormatError(
                f"column {name!r} ({col.type}) holds values outside the years 1-9999, "
                "which Python's datetime cannot represent (read it with batch_format="
                "'numpy' or 'arrow' instead)",
                unit.path,
                where,
            )


def without_views(table: pa.Table) -> pa.Table:
    """``table`` with its string and binary *view* columns (also inside lists, structs,
    maps and dictionaries) as ``large_string`` and ``large_binary``: the same values, in
    the types the loader's gathers can take (pyarrow has no ``take`` for them). List
    views stay as they are: ``take`` handles them, and pyarrow 26 casts them to lists
    wrongly."""
    target = pa.schema(
        [f.with_type(_no_views(f.type)) for f in table.schema], metadata=table.schema.metadata
    )
    return table if target.equals(table.schema) else table.cast(target)


def _no_views(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t):
        return pa.large_string()
    if pa.types.is_binary_view(t):
        return pa.large_binary()
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_no_views(t.value_type)))
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_no_views(t.value_type)))
    if pa.types.is_fixed_size_list(t):
        return pa.list_(t.value_field.with_type(_no_views(t.value_type)), t.list_size)
    if pa.types.is_map(t):
        return pa.map_(
            t.key_field.with_type(_no_views(t.key_type)),
            t.item_field.with_type(_no_views(t.item_type)),
            t.keys_sorted,
        )
    if pa.types.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(_no_views(t.field(i).type)) for i in range(t.num_fields)]
        )
    if pa.types.is_dictionary(t):
        return pa.dictionary(t.index_type, _no_views(t.value_type), t.ordered)
    return t


def _python_bounds(t: pa.DataType) -> tuple[int, int] | None:
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
