"""Arrow tables to what a training loop consumes: per-sample dicts, or whole batches of
numpy arrays, torch tensors or Arrow record batches.

Per-sample values (``batch_format=None``) are Python objects, column by column, with one
rule per type so every row of a column has the same kind of value:

- numbers and booleans: ``int``/``float``/``bool`` (``None`` for nulls);
- numeric lists of one length per column chunk: numpy rows (the DataLoader stacks them);
- dates and times: ``datetime.date``/``datetime``/``time``/``timedelta``; timestamps and
  durations in nanoseconds: ``numpy.datetime64``/``numpy.timedelta64`` in ``ns`` (exact,
  which ``datetime`` is not); times of day in nanoseconds: ``int`` nanoseconds;
- everything else (strings, binary, decimals, lists, structs, maps, dictionaries): what
  ``pyarrow``'s ``to_pylist`` gives.

A date or timestamp outside the years 1-9999 cannot be a ``datetime``, nor can bytes that
are not UTF-8 be a ``str``: each is a :class:`FormatError` naming the file, the unit and
the column (see :func:`check_values`) wherever it would become a Python object: per
sample and in torch batches, and, nested in lists, structs or maps, in numpy batches too.
Numpy batches keep a date column of its own exactly, as ``datetime64``.

Batches (``"numpy"``/``"torch"``) turn numeric columns into arrays without copies where
Arrow allows, dates and timestamps into ``datetime64``, times of day into integer counts
in the column's unit, numeric lists of one length into 2-D arrays, and variable-length numeric
lists (token ids) into 2-D arrays padded to the batch's longest row or to ``pad_to``,
with a ``<column>_lengths`` int64 column, when ``pad_to`` is set.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError, FormatError, PlanError
from shardwise.formats import Unit
from shardwise.loader.pyvalues import holds_text, out_of_python_range, python_bounds
from shardwise.loader.transport import NumpyColumn, RingBatch, active, string_column

__all__ = [
    "Padding",
    "check_padding",
    "check_values",
    "column_to_numpy",
    "is_ragged",
    "pad",
    "rows",
    "runs",
    "split",
    "torch_other",
    "without_views",
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


def runs(tables: Iterator[pa.Table], size: int) -> Iterator[pa.Table]:
    """Tables of a whole number of batches of ``size`` rows, from a stream of tables."""
    carry: list[pa.Table] = []
    have = 0
    for t in tables:
        carry.append(t)
        have += t.num_rows
        if have < size:
            continue
        table = pa.concat_tables(carry) if len(carry) > 1 else carry[0]
        full = have - have % size
        yield table.slice(0, full)
        rest = table.slice(full)
        carry, have = ([rest] if rest.num_rows else []), rest.num_rows
    if have:
        raise PlanError(f"internal error: {have} samples left over after the last full batch")


def split(run: pa.Table, size: int, fmt: str, pad_to: Padding = None) -> Iterator[Any]:
    """The batches of ``size`` rows of ``run`` in format ``fmt``; columns are converted
    once per run and batches are slices of them (the per-batch cost of converting is
    most of the cost at ordinary batch sizes). Padded columns are built per batch."""
    n = run.num_rows // size
    if fmt == "arrow" or not run.num_columns:
        run = run.combine_chunks()
        for i in range(n):
            part = run.slice(i * size, size)
            yield (
                part.to_batches()[0] if run.num_columns else pa.record_batch([], schema=run.schema)
            )
        return
    batch = run.combine_chunks().to_batches()[0]
    # inside a DataLoader worker that sends numpy batches through its ring, arrays are
    # copied into the ring anyway (and arrive writable), so they stay read-only views
    # here, and string columns keep their Arrow arrays so their buffers go as they are
    ring = fmt == "numpy" and active()
    padded = [
        name
        for name, col in zip(batch.schema.names, batch.columns)
        if pad_to is not None and is_ragged(col.type)
    ]
    columns = to_numpy(batch.drop_columns(padded), writable=not ring)
    strings = {
        name: col
        for name, col in zip(batch.schema.names, batch.columns)
        if ring
        and col.null_count == 0
        and (pa.types.is_string(col.type) or pa.types.is_large_string(col.type))
    }
    for i in range(n):
        part = {k: v[i * size : (i + 1) * size] for k, v in columns.items()}
        for name in padded:
            part[name], part[f"{name}_lengths"] = pad(
                batch.column(name).slice(i * size, size), pad_to
            )
        out = _package(part, fmt)
        if ring:  # the whole batch goes through the ring as one region
            for k, col in strings.items():
                out[k] = string_column(part[k], col.slice(i * size, size))
            out = RingBatch(out)
        yield out


def is_ragged(t: pa.DataType) -> bool:
    """A list type of numbers whose rows may differ in length (padded under ``pad_to``)."""
    return (pa.types.is_list(t) or pa.types.is_large_list(t)) and _numeric(t.value_type)


def pad(col: pa.Array, pad_to: Padding) -> tuple[np.ndarray, np.ndarray]:
    """A list-of-numbers column as a 2-D array padded with zeros, to its longest row or
    to ``pad_to`` (longer rows are cut there), and each row's length in it. Null rows are
    empty; null values inside a row are zeros."""
    n = len(col)
    lengths = (
        pc.fill_null(pc.list_value_length(col), 0).to_numpy(zero_copy_only=False).astype(np.int64)
    )
    width = int(lengths.max(initial=0)) if pad_to == "longest" else int(pad_to or 0)
    kept = np.minimum(lengths, width)
    flat = pc.fill_null(pc.list_flatten(col), 0).to_numpy(zero_copy_only=False)
    out = np.zeros((n, width), dtype=_numpy_type(col.type.value_type))
    row = np.repeat(np.arange(n), kept)
    pos = np.arange(int(kept.sum())) - np.repeat(np.cumsum(kept) - kept, kept)
    out[row, pos] = flat[np.repeat(np.cumsum(lengths) - lengths, kept) + pos]
    return out, kept


def _numpy_type(t: pa.DataType) -> np.dtype[Any]:
    return np.dtype(t.to_pandas_dtype())


def column_to_numpy(col: pa.Array) -> np.ndarray:
    """Numeric columns zero-copy where Arrow allows; fixed-size and equal-length lists of
    numbers become 2-D arrays (embeddings, token windows) instead of arrays of objects."""
    t = col.type
    if pa.types.is_time(t):  # numpy has no time of day: a count in the column's unit
        return col.cast(pa.int32() if pa.types.is_time32(t) else pa.int64()).to_numpy(
            zero_copy_only=False
        )
    if pa.types.is_fixed_size_list(t) and col.null_count == 0 and _numeric(t.value_type):
        values = col.flatten().to_numpy(zero_copy_only=False)
        return values.reshape(len(col), t.list_size)
    if (
        (pa.types.is_list(t) or pa.types.is_large_list(t))
        and col.null_count == 0
        and _numeric(t.value_type)
    ):
        offsets = col.offsets.to_numpy()
        lengths = np.diff(offsets)
        if len(lengths) and (lengths == lengths[0]).all():
            return col.flatten().to_numpy(zero_copy_only=False).reshape(len(col), int(lengths[0]))
    return col.to_numpy(zero_copy_only=False)


def rows(batch: pa.RecordBatch) -> Iterator[dict[str, Any]]:
    """Per-sample dicts, by the rules in the module docstring."""
    names = batch.schema.names
    columns = [_python_values(name, col) for name, col in zip(names, batch.columns)]
    for values in zip(*columns):
        yield dict(zip(names, values))


def _python_values(name: str, col: pa.Array) -> list[Any]:
    t = col.type
    try:
        if (
            col.null_count == 0
            and (pa.types.is_fixed_size_list(t) or pa.types.is_list(t))
            and _numeric(t.value_type)
        ):
            arr = column_to_numpy(col)  # one writable copy: rows are torch-safe views
            return list(np.array(arr)) if arr.dtype != object else col.to_pylist()
        if col.null_count == 0 and _numeric(t):
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


def _nullable(col: pa.Array, values: list[Any]) -> list[Any]:
    if not col.null_count:
        return values
    nulls = col.is_null().to_numpy(zero_copy_only=False)
    return [None if null else v for v, null in zip(values, nulls)]


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


def _numeric(t: pa.DataType) -> bool:
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


def _package(columns: dict[str, np.ndarray], fmt: str) -> dict[str, Any]:
    if fmt == "numpy":
        return {k: v.view(NumpyColumn) for k, v in columns.items()}
    from shardwise._optional import require

    torch = require("torch", 'batch_format="torch"')
    return {
        k: torch.from_numpy(v) if v.dtype.kind in "biuf" else torch_other(v)
        for k, v in columns.items()
    }


def torch_other(values: np.ndarray) -> Any:
    """A column of a torch batch that is not a tensor: Python objects (strings, binary,
    lists, ...) stay a numpy object array (torch's ``default_convert`` passes it as it
    is; a list it would walk element by element); dates and durations, which a tensor
    cannot hold, become a list of their Python values."""
    return values if values.dtype == object else values.tolist()
