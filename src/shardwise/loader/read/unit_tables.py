"""One unit as one contiguous Arrow table, with its read errors named.

A unit that cannot be read is a :class:`FormatError` naming its file and its place (row
group, ...); its values are checked (:func:`~shardwise.loader.read.values.check_values`)
when they must become Python objects.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import FormatError, ShardwiseError
from shardwise.formats import OnError
from shardwise.index import DatasetIndex
from shardwise.loader.read.mixed import MixedIndex, place_of, unit_reader
from shardwise.loader.read.values import check_values, without_views
from shardwise.storage.cache import NodeCache

__all__ = ["table_loader"]


def table_loader(
    index: DatasetIndex | MixedIndex,
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
    on_error: OnError,
    cache: NodeCache | None,
    batch_format: str | None,
) -> Callable[[int], pa.Table]:
    """A function reading one unit of ``index`` as one contiguous table; its strings and
    dates are checked where ``batch_format`` makes them Python objects."""
    reader = unit_reader(index, columns, filter, on_error, cache)
    units = index.units
    # per sample and in torch batches, dates become Python objects; numpy keeps datetime64
    python_dates = batch_format in (None, "torch")
    python_values = batch_format != "arrow"

    def load(u: int) -> pa.Table:
        place = place_of(index, u)
        try:
            # each unit as one contiguous table: gathers from chunked tables are slow
            table = without_views(reader.read(u)).combine_chunks()
        except FormatError as exc:
            if exc.path is not None and exc.location:
                raise
            raise FormatError(exc.reason, units[u].path, place) from exc
        except ShardwiseError:
            raise
        except (pa.ArrowException, OSError, ValueError, EOFError) as exc:
            raise FormatError(
                f"cannot read this unit ({type(exc).__name__}: {exc})", units[u].path, place
            ) from exc
        if python_values:  # strings and nested dates (and Python's dates) must convert
            check_values(table, units[u], place, dates=python_dates)
        return table

    return load
