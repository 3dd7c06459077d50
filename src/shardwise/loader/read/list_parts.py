"""Lists of numbers of any length (token ids) in a unit read in two parts
(:mod:`~shardwise.loader.read.unit_heads`): the head by Arrow, the rest from its pages.

A head is small, and Arrow decodes it without holding the GIL while the other reading
thread works: the page reader's walk of the levels holds it, and with two threads it made
the heads of 50,000 token rows slower (5-9 ms each against Arrow's 3-4 ms). The rest is
most of the unit, where the page reader is about twice as fast as Arrow
(:mod:`~shardwise.formats.parquet._varlist`); to find the rest's first row it walks the
levels of the head's pages again, a head's share of the unit's cost.

So the head's list columns are read by an Arrow reader of their own, let go after the
head: the unit waiting for its rest keeps no decoder of them. A column whose head has a
null or an empty list stays with Arrow for both parts (the page reader would decline it);
one the page reader declines in the rest all the same is read there by Arrow, from the
row group's start (its head decoded twice, nothing read wrong).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from shardwise.formats.parquet._varlist import eligible, read_var_lists

__all__ = ["head_lists", "list_names", "rest_lists"]


def list_names(pf: pq.ParquetFile, names: list[str]) -> list[str]:
    """The columns of ``names`` of a type the page reader of lists reads."""
    schema = pf.schema_arrow
    return [n for n in names if eligible(schema.field(n).type)]


def head_lists(pf: pq.ParquetFile, group: int, names: list[str], rows: int) -> dict[str, pa.Array]:
    """The first ``rows`` rows of the columns ``names`` of row group ``group``, by Arrow;
    only the columns with no null list, null value or empty list among them."""
    if not names or rows <= 0:
        return {}
    table = _arrow_rows(pf, group, names, 0, rows)
    return {n: table.column(n).combine_chunks() for n in names if _plain(table.column(n))}


def rest_lists(
    pf: pq.ParquetFile, source: Any, group: int, names: list[str], lo: int, rows: int
) -> dict[str, pa.Array]:
    """Rows ``lo`` to ``lo + rows`` of the columns ``names`` of row group ``group``: from
    their pages, or by Arrow where the page reader declines."""
    out = read_var_lists(pf, source, group, names, (lo, lo + rows))
    declined = [n for n in names if n not in out]
    if declined:
        table = _arrow_rows(pf, group, declined, lo, rows)
        out |= {n: table.column(n).combine_chunks() for n in declined}
    return out


def _arrow_rows(pf: pq.ParquetFile, group: int, names: list[str], lo: int, rows: int) -> pa.Table:
    """Rows ``lo`` to ``lo + rows`` of row group ``group``'s columns ``names``, by an
    Arrow reader of their own that stops after them."""
    batches, got = [], 0
    size = max(lo + rows, 1)
    for batch in pf.iter_batches(
        batch_size=size, row_groups=[group], columns=names, use_threads=False
    ):
        batches.append(batch)
        got += batch.num_rows
        if got >= lo + rows:
            break
    schema = pa.schema([pf.schema_arrow.field(n) for n in names])
    return pa.Table.from_batches(batches, schema=schema).slice(lo, rows)


def _plain(column: pa.ChunkedArray) -> bool:
    """No null list, no null value and no empty list (what the page reader reads)."""
    if column.null_count:
        return False
    for chunk in column.chunks:
        if chunk.values.null_count or (
            len(chunk) and pc.min(pc.list_value_length(chunk)).as_py() == 0
        ):
            return False
    return True
