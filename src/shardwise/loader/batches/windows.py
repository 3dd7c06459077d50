"""The one way a window of a worker's plan is built, on either path.

A window is the order of its rows and, to take them from, either its units' tables (with
the numpy views gathers take, see :mod:`shardwise.loader.batches.gather`) or its columns
built as its units arrived (:mod:`shardwise.loader.batches.arrival`). The second is used
on a pool of threads (the in-process path) for numpy and torch batches whose columns are
numbers, fixed-size lists of numbers, strings or binary: the first window's units are
read from the start, while the order is worked out, and the next one's, under
``prefetch_bytes``, once a window's first piece is queued (:meth:`WindowBuilder.read_ahead`).
Otherwise (one thread, Arrow batches, variable-length lists) units are read ahead one at
a time across window boundaries, and a window that arrival refuses (a unit with nulls in
a column of numbers) is read into tables the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa

from shardwise.errors import PlanError
from shardwise.loader.batches.arrival import ArrivalWindow, Filling, arrival_schema
from shardwise.loader.batches.gather import Views, unit_views
from shardwise.loader.batches.reading import Reading
from shardwise.loader.read.prefetch import Prefetcher
from shardwise.plan.compose import WorkerWindows

__all__ = ["Loaded", "Window", "WindowBuilder", "WindowOrder", "unit_loader"]

Loaded = tuple[pa.Table, Views]  # a unit's table and what gathers take from it
WindowOrder = tuple[list[int], np.ndarray, np.ndarray]  # units, then (unit, row) per place


@dataclass
class Window:
    """A window's order, and either its unit tables and views (gathered by pieces) or
    its columns built as its units arrived."""

    unit_ids: np.ndarray
    rows: np.ndarray
    tables: dict[int, pa.Table] = field(default_factory=dict)
    views: Views = field(default_factory=dict)
    schema: pa.Schema | None = None
    arrival: ArrivalWindow | None = None


def unit_loader(reading: Reading) -> Callable[[int], Loaded]:
    """Reads a unit and prepares the numeric views that gathers and window columns take
    from it, on the reading thread (also while the window's order is still being worked
    out). Strings and binary values stay Arrow (see :mod:`shardwise.loader.batches.texts`)."""
    load = reading.loader()

    def load_unit(u: int) -> Loaded:
        table = load(u)
        return table, unit_views({u: table}, u)

    load_unit.close = getattr(load, "close", _nothing)  # type: ignore[attr-defined]
    return load_unit


def _nothing() -> None:
    """What closing a loader that holds nothing does."""


def _from_tables(
    unit_ids: np.ndarray, rows: np.ndarray, units: Iterable[tuple[int, Loaded]]
) -> Window:
    """A window gathered by pieces from its units' tables."""
    win = Window(unit_ids, rows)
    for u, (table, views) in units:
        win.schema = table.schema
        win.tables[u] = table
        win.views.update(views)
    return win


class WindowBuilder:
    """Builds the windows of ``wp`` in order (see the module docstring): as their units
    arrive when ``pool`` is given and the columns allow, else from read-ahead tables."""

    def __init__(self, reading: Reading, wp: WorkerWindows, pool: Executor | None = None) -> None:
        self.reading, self.pool = reading, pool
        self.load = unit_loader(reading)
        self.units = wp.window_units()
        self.arrival = (
            pool is not None
            and bool(self.units)
            and arrival_schema(reading.schema(), reading.batch_format)
        )
        self.filling: dict[int, Filling] = {}
        self.stream: Generator[Loaded, None, None] | None = None
        self.next: int | None = None  # the window to read ahead, from a built arrival window
        self.held: Prefetcher[int, Loaded] | None = None  # reads held to the first window
        if self.arrival:
            self._start(0).ahead(1 << 62)
        else:  # units read ahead one at a time, across window boundaries
            threads = 2 * reading.num_threads if pool is not None else None
            prefetcher = reading.prefetcher(self.load, threads, executor=pool)
            # the first window's units are all read before its first batch: one slow
            # unit must not keep the others waiting behind it
            prefetcher.first_keys = len(self.units[0]) if self.units else 0
            if pool is not None and self.units and reading.first_piece(reading.batch_size):
                # a first piece of the first window only: the next window's reads wait for it
                self.held, prefetcher.hold_after = prefetcher, len(self.units[0])
            self.stream = prefetcher.iterate([u for w in self.units for u in w])

    def window(self, w: int, order: WindowOrder) -> Window:
        """Window ``w`` (its order ``order``), once all of its units are in."""
        unit_list, unit_ids, rows = order
        if unit_list != self.units[w]:
            raise PlanError(
                f"internal error: window {w} reads units {unit_list[:5]}..., "
                f"its read-ahead {self.units[w][:5]}..."
            )
        if self.stream is not None:
            if w > 0:  # a later window is needed: its reads are held no longer
                self._release()
            stream = self.stream
            return _from_tables(unit_ids, rows, ((u, next(stream)) for u in unit_list))
        return self._arrived(w, order)

    def _arrived(self, w: int, order: WindowOrder) -> Window:
        """Window ``w`` built as its units arrived; the next one's first units are then
        read ahead. A refused window is read again into tables (rare: nulls in a column
        of numbers, ...)."""
        unit_list, unit_ids, rows = order
        filling = self._start(w)
        filling.win.order(unit_ids, rows)  # while the last units are still read
        built = filling.wait()
        del self.filling[w]
        self.next = w + 1  # read ahead once a piece of this window is queued (read_ahead)
        if built.complete():
            return Window(unit_ids, rows, schema=self.reading.schema(), arrival=built)
        assert self.pool is not None
        return _from_tables(unit_ids, rows, zip(unit_list, self.pool.map(self.load, unit_list)))

    def read_ahead(self) -> None:
        """Start reading the next window's first units (under ``prefetch_bytes``) after a
        window built as its units arrived: called once its first piece is queued, so that
        the piece is not queued behind the next window's reads. Units read ahead one at a
        time are held to the first window until then when it has a first piece of its own
        (head windows)."""
        if self.next is not None and self.next < len(self.units):
            self._start(self.next).ahead(self.reading.prefetch_bytes)
        self.next = None
        self._release()

    def _release(self) -> None:
        """Let units read ahead one at a time go past the first window."""
        if self.held is not None:
            self.held.hold_after = None
            self.held = None

    def _start(self, w: int) -> Filling:
        if w not in self.filling:
            assert self.pool is not None
            units = self.units[w]
            win = ArrivalWindow(
                units,
                [self.reading.unit_rows(u) for u in units],
                self.reading.schema(),
                self.reading.memory,
            )
            fill = partial(_fill, self.load, win)
            self.filling[w] = Filling(win, units, fill, self.reading.size, self.pool)
        return self.filling[w]

    def close(self) -> None:
        """Cancel the reads not started; close what the loader holds (units whose rests
        were not read)."""
        for f in self.filling.values():
            f.cancel()
        if self.stream is not None:
            self.stream.close()
        getattr(self.load, "close", _nothing)()


def _fill(load: Callable[[int], Loaded], win: ArrivalWindow, u: int) -> None:
    table, views = load(u)
    win.add(u, table, views)
