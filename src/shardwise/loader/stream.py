"""What one worker's piece of the plan becomes: its units read ahead, its rows gathered
in plan order, and then samples or batches.

:class:`Reading` holds everything about a dataset that reading needs (the index, the
projection, the filter, the error policy, the batch format); :func:`serial_items` is the
path of a DataLoader worker (one thread gathers and converts; two read ahead), and
:mod:`shardwise.loader.threaded` the in-process one. Both take the
:class:`~shardwise.plan.WorkerPlan` of the (rank, worker) to stream: the dataset's only
seam with the plan.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import FormatError, ShardwiseError
from shardwise.formats import OnError
from shardwise.index import DatasetIndex
from shardwise.loader.convert import Padding, check_values, rows, runs, split, without_views
from shardwise.loader.gather import Views, gather
from shardwise.loader.memory import WindowMemory
from shardwise.loader.prefetch import Prefetcher
from shardwise.loader.sources import MixedIndex, open_reader, place_of
from shardwise.plan.compose import WindowSource
from shardwise.storage.cache import NodeCache

__all__ = ["BatchFormat", "Reading", "serial_items"]

BatchFormat = Literal["numpy", "torch", "arrow"]
PIECE_ROWS = 4096  # rows gathered at once from a window (rounded to whole batches)


@dataclass(frozen=True)
class Reading:
    """How a dataset's units are read and what they become.

    Attributes:
        index: the dataset (a :class:`MixedIndex` for several sources).
        columns, filter, on_error: projection, row filter and bad-record policy.
        batch_format: ``None`` (per-sample dicts) or a batch format.
        batch_size: samples per batch.
        interleave: units per window (bounds how far units are read ahead).
        prefetch_bytes: read-ahead budget.
        pad_to: padding of variable-length list columns in numpy/torch batches.
        num_threads: threads of the in-process path.
        pin_memory: pin torch batches of the in-process path (CUDA only).
        cache: the node-local cache remote units are read through, if any.
        memory: the dataset's window memory, kept for its next windows and epochs.
    """

    index: DatasetIndex | MixedIndex
    columns: list[str] | None
    filter: pc.Expression | None
    on_error: OnError
    batch_format: BatchFormat | None
    batch_size: int
    interleave: int
    prefetch_bytes: int
    pad_to: Padding = None
    num_threads: int = 1
    pin_memory: bool = False
    cache: NodeCache | None = None
    memory: WindowMemory | None = None

    def piece_rows(self, rows: int = PIECE_ROWS) -> int:
        """Rows gathered in one go: whole batches, about ``rows``."""
        return max(1, rows // self.batch_size) * self.batch_size

    def loader(self) -> Callable[[int], pa.Table]:
        """A function reading one unit as one contiguous table; a unit that cannot be
        read is a :class:`FormatError` naming its file and its place (row group, ...)."""
        reader = open_reader(self.index, self.columns, self.filter, self.on_error, self.cache)
        units = self.index.units
        # per sample and in torch batches, dates become Python objects; numpy keeps datetime64
        python_dates = self.batch_format in (None, "torch")
        python_values = self.batch_format != "arrow"

        def load(u: int) -> pa.Table:
            place = place_of(self.index, u)
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

    def size(self, u: int) -> int:
        """A unit's estimated decoded bytes (twice its stored size)."""
        return 2 * self.index.units[u].num_bytes

    def prefetcher(
        self, load: Callable[[int], Any] | None = None, max_ahead: int | None = None, **kwargs: Any
    ) -> Prefetcher[int, Any]:
        """Reads units ahead, across window boundaries, under ``prefetch_bytes``, with
        ``load`` (default: :meth:`loader`'s), at most ``max_ahead`` at a time (default:
        two windows' worth)."""
        return Prefetcher(
            load or self.loader(),
            self.size,
            budget_bytes=self.prefetch_bytes,
            max_ahead=max_ahead or 2 * self.interleave + 2,
            **kwargs,
        )


def serial_items(reading: Reading, wp: WindowSource) -> Iterator[tuple[Any, int]]:
    """Samples (per-sample mode) or batches, each with its number of samples."""
    tables = window_tables(reading, wp)
    if reading.batch_format is None:
        for table in tables:
            for batch in table.to_batches(max_chunksize=1024):
                for row in rows(batch):
                    yield row, 1
        return
    for run in runs(tables, reading.batch_size):
        for batch in split(run, reading.batch_size, reading.batch_format, reading.pad_to):
            yield batch, reading.batch_size


def window_tables(reading: Reading, wp: WindowSource) -> Iterator[pa.Table]:
    """The worker's rows in plan order, a piece of whole batches at a time."""
    windows = list(wp.iter_windows())
    # units are read ahead one at a time, across window boundaries: the next
    # window's first units load while this one is consumed, under prefetch_bytes
    loaded_units = reading.prefetcher().iterate([u for window in windows for u in window[0]])
    # rows are gathered a piece at a time, straight from the unit tables: a whole-window
    # gather would stall this worker (and with it the DataLoader's round-robin) and
    # hold a second copy of the window
    piece = reading.piece_rows()
    try:
        for window_units, unit_ids, order in windows:
            loaded = {u: next(loaded_units) for u in window_units}
            views: Views = {}
            for start in range(0, len(order), piece):
                yield gather(
                    loaded, unit_ids[start : start + piece], order[start : start + piece], views
                )
            del loaded, views
    finally:
        loaded_units.close()
