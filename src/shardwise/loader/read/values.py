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

import pyarrow as pa

from shardwise.errors import FormatError
from shardwise.formats import Unit
from shardwise.loader.read.pyvalues import holds_text, out_of_python_range, python_bounds

__all__ = ["check_values", "without_views"]


def check_values(table: pa.Table, unit: Unit, where: str, *, dates: bool = True) -> None:
    """Refuse a unit whose values cannot be Python objects, naming the file, the unit
    (``where``) and the column: strings that are not UTF-8 (Parquet readers do not check
    it, and a damaged file can hold such bytes), dates, timestamps or durations outside
    the years 1-9999 nested in lists, structs or maps (they become Python objects in
    every batch format but Arrow's) and, with ``dates``, such values in a column of their
    own (per-sample values and torch batches make them Python objects; numpy batches
    keep them as ``datetime64``)."""
    for name, col in zip(table.column_names, table.columns):
        if holds_text(col.type):
            try:
                col.validate(full=True)  # about 20 ms per GB of text
            except pa.ArrowInvalid as exc:
                raise FormatError(
                    f"column {name!r} ({col.type}) holds bytes that are not UTF-8 text ({exc})",
                    unit.path,
                    where,
                ) from exc
        nested = python_bounds(col.type) is None
        if (dates or nested) and out_of_python_range(col):
            instead = "'arrow'" if nested else "'numpy' or 'arrow'"
            raise FormatError(
                f"column {name!r} ({col.type}) holds values outside the years 1-9999, "
                f"which Python's datetime cannot represent (read it with batch_format="
                f"{instead} instead)",
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
