"""Which columns of a row group a page reader decodes: one-column fields of its types, and
structs of one-column children, one of them of its types.

:func:`read_leaves` matches the Arrow schema's fields to the Parquet columns (leaves)
and hands each eligible one to the page reader's column function; whatever it declines
(:class:`~shardwise.formats.parquet._pages.Unreadable`, logged at debug level) is left
out, for Arrow to read.

Image datasets often keep each image as a struct, ``{bytes: binary, path: string}`` (the
layout of Hugging Face's ``Image`` feature). Its ``bytes`` child is one Parquet column like
a top-level binary one, with one more definition level for the struct. The page reader
that knows the child's type reads it (:mod:`shardwise.formats.parquet._binarydict`),
requiring every definition level at its maximum: no struct and no value is null, so the
struct has no nulls either. Arrow reads each other child alone (``image.path``), for the
whole row group, sliced to the rows wanted. The children are put back together in the
struct's own type (:func:`read_struct`). Only structs of one-column children (no lists or
structs inside) are read so; if the reader declines every eligible child, Arrow reads the
struct whole."""

from __future__ import annotations

import functools
import logging
import sys
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from shardwise.formats.parquet._pages import Unreadable

__all__ = ["ColumnReader", "flat_struct", "read_leaves", "read_struct"]

log = logging.getLogger(__name__)

# reads one column: (pf, source, group, leaf, field, rows) -> its values
ColumnReader = Callable[[Any, Any, int, int, pa.Field, Any], pa.Array]


def read_leaves(
    pf: Any,
    source: Any,
    group: int,
    names: list[str],
    rows: tuple[int, int] | None,
    eligible: Callable[[pa.DataType], bool],
    column: ColumnReader,
    structs: bool = False,
) -> dict[str, pa.Array]:
    """The columns of ``names`` that are one Parquet column each and ``eligible``, read by
    ``column(pf, source, group, leaf, field, rows)`` (``structs``: also flat structs with
    an eligible child, :func:`read_struct`); one it
    declines (:class:`Unreadable`, logged at debug level) is left out, for Arrow to read,
    and so is every column of a schema whose fields cannot be matched to its Parquet
    columns."""
    out: dict[str, pa.Array] = {}
    schema = pf.schema_arrow
    wanted = set(names)
    for i, leaf, struct in _plan_of(schema, pf.metadata.num_columns, eligible, structs):
        field = schema.field(i)
        if field.name not in wanted:
            continue
        try:
            if struct:
                out[field.name] = read_struct(
                    pf, source, group, leaf, field, rows, eligible, column
                )
            else:
                out[field.name] = column(pf, source, group, leaf, field, rows)
        except Unreadable as exc:
            log.debug("row group %d, column %r: left to Arrow (%s)", group, field.name, exc)
    return out


Plan = tuple[tuple[int, int, bool], ...]


def _plan_of(
    schema: pa.Schema, num_columns: int, eligible: Callable[[pa.DataType], bool], structs: bool
) -> Plan:
    try:
        return _plan(schema, num_columns, eligible, structs)
    except TypeError:  # a schema that cannot be hashed (an extension type's)
        return _plan.__wrapped__(schema, num_columns, eligible, structs)


@functools.lru_cache(maxsize=256)
def _plan(
    schema: pa.Schema, num_columns: int, eligible: Callable[[pa.DataType], bool], structs: bool
) -> Plan:
    """The fields of ``schema`` a page reader takes (``eligible``; ``structs``: flat
    structs too): each one's place, its first Parquet column and whether it is a struct;
    none when the fields cannot be matched to the file's ``num_columns`` columns. Worked
    out once per schema and reader (a unit read of a wide table asked it of every field)."""
    if (
        sys.byteorder != "little"
        or len(set(schema.names)) != len(schema.names)
        or sum(_leaves(f.type) for f in schema) != num_columns
    ):
        return ()
    plan, leaf = [], 0
    for i, field in enumerate(schema):
        width = _leaves(field.type)
        if width == 1 and eligible(field.type):
            plan.append((i, leaf, False))
        elif structs and flat_struct(field.type, eligible):
            plan.append((i, leaf, True))
        leaf += width
    return tuple(plan)


def flat_struct(t: pa.DataType, eligible: Callable[[pa.DataType], bool]) -> bool:
    """Whether ``t`` is a struct of one-column children, one of them ``eligible``."""
    if not pa.types.is_struct(t) or not t.num_fields:
        return False
    kids = [t.field(i) for i in range(t.num_fields)]
    return (
        len({k.name for k in kids}) == len(kids)
        and all(_leaves(k.type) == 1 for k in kids)
        and any(eligible(k.type) for k in kids)
    )


def _leaves(t: pa.DataType) -> int:
    """How many Parquet columns hold a field of type ``t``."""
    if isinstance(t, pa.BaseExtensionType):
        return _leaves(t.storage_type)
    if pa.types.is_struct(t):
        return sum(_leaves(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_map(t):
        return _leaves(t.key_type) + _leaves(t.item_type)
    if (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_list_view(t)
        or pa.types.is_large_list_view(t)
    ):
        return _leaves(t.value_type)
    return 1


def read_struct(
    pf: Any,
    source: Any,
    group: int,
    leaf: int,
    field: pa.Field,
    rows: tuple[int, int] | None,
    eligible: Callable[[pa.DataType], bool],
    column: ColumnReader,
) -> pa.Array:
    """The struct ``field`` (whose first Parquet column is ``leaf``) of row group
    ``group``, rows ``rows`` (all: None): its ``eligible`` children read from their pages
    by ``column`` (unless it declines one, :class:`Unreadable`), the others by Arrow."""
    t = field.type
    count = pf.metadata.row_group(group).num_rows
    lo, hi = rows if rows is not None else (0, count)
    children: list[pa.Array] = []
    decoded = 0
    for i in range(t.num_fields):
        kid = t.field(i)
        path = pa.field(f"{field.name}.{kid.name}", kid.type, kid.nullable)
        try:
            if not eligible(kid.type):
                raise Unreadable("a child for Arrow")
            children.append(column(pf, source, group, leaf + i, path, rows))
            decoded += 1
        except Unreadable:
            children.append(_by_arrow(pf, group, path.name, lo, hi))
    if not decoded:
        raise Unreadable("no child of the struct is read from its pages")
    if any(len(c) != hi - lo for c in children):
        raise Unreadable("children of other lengths than the rows wanted")
    return pa.StructArray.from_arrays(children, fields=[t.field(i) for i in range(t.num_fields)])


def _by_arrow(pf: Any, group: int, path: str, lo: int, hi: int) -> pa.Array:
    """The struct's child at ``path`` (``struct.child``), read by Arrow alone, rows
    ``lo`` to ``hi``."""
    try:
        table = pf.read_row_group(group, columns=[path], use_threads=False)
        struct = table.column(0).combine_chunks()
        if not pa.types.is_struct(struct.type) or struct.type.num_fields != 1:
            raise Unreadable(f"Arrow read {path!r} as {struct.type}")
        return struct.field(0).slice(lo, hi - lo)
    except (pa.ArrowException, OSError, KeyError, IndexError) as exc:
        # damage (OSError: a page that does not inflate) or a dropped connection: declined,
        # so the whole row group's read by Arrow reports either as it should
        raise Unreadable(f"Arrow could not read {path!r} alone: {exc}") from exc
