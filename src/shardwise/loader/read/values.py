"""What a unit's values must be before the loader hands them on: checked and normalised
as the unit is read.

A date or timestamp outside the years 1-9999 cannot be a ``datetime``, nor can bytes that
are not UTF-8 be a ``str``: each is a :class:`FormatError` naming the file, the unit and
the column (see :func:`check_values`) wherever it would become a Python object: per
sample and in torch batches, and, nested in lists, structs or maps, in numpy batches too.
Numpy batches keep a date column of its own exactly, as ``datetime64``. String and binary
*view* columns become ``large_string`` and ``large_binary`` (:func:`without_views`), the
types the loader's gathers can take.
"""

from __future__ import annotations

import functools

import pyarrow as pa

from shardwise.errors import FormatError
from shardwise.formats import Unit
from shardwise.loader.read.pyvalues import (
    holds_dates,
    holds_text,
    out_of_python_range,
    python_bounds,
)

__all__ = ["check_values", "without_views"]


def check_values(table: pa.Table, unit: Unit, where: str, *, dates: bool = True) -> None:
    """Refuse a unit whose values cannot be Python objects, naming the file, the unit
    (``where``) and the column: strings that are not UTF-8 (Parquet readers do not check
    it, and a damaged file can hold such bytes), dates, timestamps or durations outside
    the years 1-9999 nested in lists, structs or maps (they become Python objects in
    every batch format but Arrow's) and, with ``dates``, such values in a column of their
    own (per-sample values and torch batches make them Python objects; numpy batches
    keep them as ``datetime64``)."""
    for i, text, dated in _to_check(table.schema, dates):
        name, col = table.column_names[i], table.column(i)
        if text:
            try:
                col.validate(full=True)  # about 20 ms per GB of text
            except pa.ArrowInvalid as exc:
                raise FormatError(
                    f"column {name!r} ({col.type}) holds bytes that are not UTF-8 text ({exc})",
                    unit.path,
                    where,
                ) from exc
        if dated and out_of_python_range(col):
            nested = python_bounds(col.type) is None
            instead = "'arrow'" if nested else "'numpy' or 'arrow'"
            raise FormatError(
                f"column {name!r} ({col.type}) holds values outside the years 1-9999, "
                f"which Python's datetime cannot represent (read it with batch_format="
                f"{instead} instead)",
                unit.path,
                where,
            )


def _to_check(schema: pa.Schema, dates: bool) -> tuple[tuple[int, bool, bool], ...]:
    """The columns :func:`check_values` looks into: (place, text to validate, dates to
    check), worked out once per schema (a unit of a wide table asked it of every column)."""
    try:
        return _columns_to_check(schema, dates)
    except TypeError:  # a schema that cannot be hashed (an extension type's)
        return _columns_to_check.__wrapped__(schema, dates)


@functools.lru_cache(maxsize=256)
def _columns_to_check(schema: pa.Schema, dates: bool) -> tuple[tuple[int, bool, bool], ...]:
    out = []
    for i, field in enumerate(schema):
        text = holds_text(field.type)
        nested = python_bounds(field.type) is None
        dated = (dates or nested) and holds_dates(field.type)
        if text or dated:
            out.append((i, text, dated))
    return tuple(out)


def without_views(table: pa.Table) -> pa.Table:
    """``table`` with its string and binary *view* columns (also inside lists, structs,
    maps and dictionaries) as ``large_string`` and ``large_binary``: the same values, in
    the types the loader's gathers can take (pyarrow has no ``take`` for them). List
    views stay as they are: ``take`` handles them, and pyarrow 26 casts them to lists
    wrongly."""
    if not _has_views(table.schema):
        return table
    target = pa.schema(
        [f.with_type(_no_views(f.type)) for f in table.schema], metadata=table.schema.metadata
    )
    return table if target.equals(table.schema) else table.cast(target)


def _has_views(schema: pa.Schema) -> bool:
    """Whether a field of ``schema`` is or holds a string or binary view (once per schema)."""
    try:
        return _views(schema)
    except TypeError:  # a schema that cannot be hashed (an extension type's)
        return _views.__wrapped__(schema)


@functools.lru_cache(maxsize=256)
def _views(schema: pa.Schema) -> bool:
    return any(_no_views(f.type) != f.type for f in schema)


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
