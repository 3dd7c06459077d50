"""A unit's first rows decoded without the rest: the head of a head window
(:mod:`shardwise.plan.blocks`).

Only plain Parquet reads take this path (no filter, no node cache, one dataset): Arrow's
``iter_batches`` over the one row group decodes its pages in order and stops after the
first ``rows`` rows. Anything else, or a head read that fails or gives another schema,
answers None, and the caller reads the whole unit and slices it (a bad unit is then
named by the whole read's :class:`~shardwise.errors.FormatError`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import ShardwiseError
from shardwise.index import DatasetIndex
from shardwise.loader.read.mixed import MixedIndex
from shardwise.storage import open_arrow_input
from shardwise.storage.cache import NodeCache

__all__ = ["head_reader"]

HeadReader = Callable[[int, int], "pa.Table | None"]


def head_reader(
    index: DatasetIndex | MixedIndex,
    columns: Sequence[str] | None,
    filter: object,
    cache: NodeCache | None,
    schema: pa.Schema,
) -> HeadReader | None:
    """A function giving unit ``u``'s first ``rows`` rows as one contiguous table of
    ``schema`` (or None: read the whole unit), or None when ``index`` has no such path."""
    if not isinstance(index, DatasetIndex) or index.format != "parquet":
        return None
    if filter is not None or cache is not None:
        return None
    cols = list(columns) if columns is not None else None
    options = dict(index.storage_options or {})

    def head(u: int, rows: int) -> pa.Table | None:
        unit = index.units[u]
        try:
            table = _read_head(unit.path, unit.index, cols, rows, options)
        except (pa.ArrowException, OSError, ValueError, IndexError, EOFError, ShardwiseError):
            return None  # the whole read says what is wrong
        if table.num_rows != rows or not table.schema.equals(schema):
            return None
        return table

    return head


def _read_head(
    path: str, group: int, columns: list[str] | None, rows: int, options: dict[str, object]
) -> pa.Table:
    """Row group ``group``'s first ``rows`` rows (fewer if it has fewer)."""
    with open_arrow_input(path, **options) as f:
        pf = pq.ParquetFile(f)
        try:
            batches, got = [], 0
            for batch in pf.iter_batches(
                batch_size=rows, row_groups=[group], columns=columns, use_threads=False
            ):
                batches.append(batch)
                got += batch.num_rows
                if got >= rows:
                    break
            table = pa.Table.from_batches(batches)
        finally:
            pf.close()
    return table.slice(0, rows).combine_chunks()
