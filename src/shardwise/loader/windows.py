"""The in-process path's windows: built as their units arrive, or gathered by pieces.

Windows of numpy and torch batches whose columns are numbers, fixed-size lists of
numbers, strings or binary are built as their units arrive (:class:`Fills`, see
:mod:`shardwise.loader.arrival`). The others (Arrow batches, variable-length lists, a
unit with nulls in a column of numbers) keep their units' tables, and each piece is
gathered from them (:func:`load_window`, see :mod:`shardwise.loader.gather`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import pyarrow as pa

from shardwise.errors import PlanError
from shardwise.loader.arrival import ArrivalWindow, Filling, arrival_schema
from shardwise.loader.gather import Views
from shardwise.loader.stream import Reading
from shardwise.plan.compose import WindowSource

__all__ = ["Fills", "Loaded", "Window", "load_window"]

Loaded = tuple[pa.Table, Views]  # a unit's table and what gathers take from it


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


def load_window(
    window: tuple[list[int], np.ndarray, np.ndarray], units: Iterator[tuple[pa.Table, Views]]
) -> Window:
    """The window's units (tables and views), taken from ``units`` (read ahead)."""
    unit_list, unit_ids, rows = window
    win = Window(unit_ids, rows)
    for u in unit_list:
        table, views = next(units)
        win.schema = table.schema
        win.tables[u] = table
        win.views.update(views)
    return win


class Fills:
    """The windows built as their units arrive (:mod:`shardwise.loader.arrival`), when
    the columns allow: the first one's units are read from the start, while the order is
    worked out; the next one's, under ``prefetch_bytes``, once a window is in use."""

    def __init__(
        self, reading: Reading, wp: WindowSource, pool: Executor, load: Callable[[int], Loaded]
    ) -> None:
        self.reading, self.pool, self.load = reading, pool, load
        self.units = wp.window_units()
        self.on = bool(self.units) and arrival_schema(_schema(reading), reading.batch_format)
        self.filling: dict[int, Filling] = {}
        if self.on:
            self._start(0).ahead(1 << 62)

    def _start(self, w: int) -> Filling:
        if w not in self.filling:
            units = self.units[w]
            win = ArrivalWindow(
                units,
                [self.reading.index.units[u].num_samples for u in units],
                _schema(self.reading),
                self.reading.memory,
            )
            self.filling[w] = Filling(
                win, units, partial(_fill, self.load, win), self.reading.size, self.pool
            )
        return self.filling[w]

    def window(self, w: int, window: tuple[list[int], np.ndarray, np.ndarray]) -> Window:
        """Window ``w`` (its order ``window``), once all of its units are in; the next
        one's first units are then read ahead."""
        unit_list, unit_ids, rows = window
        if unit_list != self.units[w]:
            raise PlanError(
                f"internal error: window {w} reads units {unit_list[:5]}..., "
                f"its read-ahead {self.units[w][:5]}..."
            )
        filling = self._start(w)
        filling.win.order(unit_ids, rows)  # while the last units are still read
        built = filling.wait()
        del self.filling[w]
        if w + 1 < len(self.units):
            self._start(w + 1).ahead(self.reading.prefetch_bytes)
        if built.complete():
            return Window(unit_ids, rows, schema=_schema(self.reading), arrival=built)
        win = Window(unit_ids, rows)  # rare: nulls in a column of numbers, ...: gathered by pieces
        for u, (table, views) in zip(unit_list, self.pool.map(self.load, unit_list)):
            win.tables[u] = table
            win.views.update(views)
        return win

    def cancel(self) -> None:
        """Cancel the reads not started."""
        for f in self.filling.values():
            f.cancel()


def _fill(load: Callable[[int], Loaded], win: ArrivalWindow, u: int) -> None:
    table, views = load(u)
    win.add(u, table, views)


def _schema(reading: Reading) -> pa.Schema:
    schema = reading.index.schema
    return (
        schema if reading.columns is None else pa.schema([schema.field(c) for c in reading.columns])
    )
