"""A window's columns in the order of its units, filled as soon as each unit is read.

Every row of a shuffled window may land in any batch, so no batch can be made before
all of the window's units are read. What can start at once is the reading: here each
unit, as soon as it is decoded, is copied into window-sized columns at its own place
(unit after unit, in the window's list of units; one ``memcpy`` per column, the GIL
released), then let go, so its memory serves the next unit's decoding. Nothing of this
needs the window's order, so the first window's units are read while the training
thread works the order out. Once the order is known, each place of the window points
at its row in these columns, and a piece of about 16,384 rows is one numpy ``take``
per column (text: a ``take`` of its views and one cast, see
:mod:`shardwise.loader.batches.texts`) on a pool thread, while the training thread cuts
batches out of the pieces before it.

This is used for numpy and torch batches whose columns are numbers, fixed-size lists of
numbers, strings or binary. A unit that cannot be written so (nulls in a column of
numbers, values unlike the first unit's, more rows than the index says) makes
:meth:`ArrivalWindow.add` refuse it; the caller then gathers the window's pieces from
the unit tables instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.gather import Views
from shardwise.loader.batches.memory import WindowMemory, map_pages, window_memory
from shardwise.loader.batches.texts import WindowTexts, is_text

__all__ = ["ArrivalWindow", "Filling", "arrival_schema"]


def arrival_schema(schema: pa.Schema, batch_format: str | None) -> bool:
    """Whether windows of ``schema`` may be built by :class:`ArrivalWindow`: numpy or
    torch batches of numbers, fixed-size lists of numbers, strings and binary."""
    return (
        batch_format in ("numpy", "torch")
        and len(schema) > 0
        and all(_kind(f.type) for f in schema)
    )


def _kind(t: pa.DataType) -> bool:
    if is_text(t):
        return True
    if pa.types.is_fixed_size_list(t):
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_floating(t)


class ArrivalWindow:
    """The columns of one window, unit after unit (see the module docstring).

    Args:
        units: the window's units, in the order their rows are laid out.
        capacity: each unit's rows (as indexed; a unit read with more is refused).
        schema: the columns read.
        memory: the dataset's window memory (default: new mappings, let go with the window).
    """

    def __init__(
        self,
        units: list[int],
        capacity: list[int],
        schema: pa.Schema,
        memory: WindowMemory | None = None,
    ) -> None:
        self.units = np.asarray(units, dtype=np.int64)
        starts = np.concatenate([[0], np.cumsum(capacity, dtype=np.int64)])
        self.start = dict(zip(units, starts[:-1].tolist()))
        self.capacity = dict(zip(units, capacity))
        self.n = int(starts[-1])
        self.text = [is_text(f.type) for f in schema]
        self.take = memory.take if memory is not None else window_memory
        self.texts = (
            WindowTexts(schema, [i for i, t in enumerate(self.text) if t], self.n, self.take)
            if any(self.text)
            else None
        )
        self.columns: list[np.ndarray | None] = [None] * len(schema)
        self.failed = False
        self.src: np.ndarray | None = None  # for each place of the window, its row in the columns
        self._lock = threading.Lock()

    def add(self, unit: int, table: pa.Table, views: Views) -> bool:
        """Copy ``unit``'s rows in (any thread); False (and the window is refused) when
        they cannot be."""
        n = table.num_rows
        arrays = [views.get((unit, i)) for i in range(len(self.text))]
        if (
            self.failed
            or n > self.capacity[unit]
            or any(a is None for a, t in zip(arrays, self.text) if not t)
        ):
            self.failed = True
            return False
        at = self.start[unit]
        for i, a in enumerate(arrays):
            if a is None:
                continue
            out = self._column(i, a)
            if out is None:
                self.failed = True
                return False
            map_pages(out[at : at + n])
            out[at : at + n] = a
        if self.texts is not None:
            self.texts.add(unit, table, at)
        return True

    def _column(self, i: int, a: np.ndarray) -> np.ndarray | None:
        """Column ``i``, made for values like ``a`` by the first unit (None: ``a`` is unlike it)."""
        with self._lock:
            if self.columns[i] is None:  # virtual memory: pages are mapped as units are written
                shape = (self.n, *a.shape[1:])
                self.columns[i] = (
                    self.take(int(np.prod(shape)) * a.itemsize).view(a.dtype).reshape(shape)
                )
            out = self.columns[i]
        assert out is not None
        return out if out.dtype == a.dtype and out.shape[1:] == a.shape[1:] else None

    def complete(self) -> bool:
        """Whether every unit was written (once all were added); False when the window
        was refused (its pieces are then gathered from the unit tables)."""
        return not self.failed and all(
            c is not None or t or self.n == 0 for c, t in zip(self.columns, self.text)
        )

    def order(self, unit_ids: np.ndarray, rows: np.ndarray) -> None:
        """The window's order: sample ``i`` is row ``rows[i]`` of unit ``unit_ids[i]``.
        It needs no unit's data, so it is worked out while the units are still read."""
        starts = np.asarray([self.start[u] for u in self.units.tolist()], dtype=np.int64)
        if not len(self.units):
            self.src = np.zeros(0, dtype=np.int64)
            return
        lo, hi = int(self.units.min()), int(self.units.max())
        if hi - lo < max(len(unit_ids), 1024):  # a table by unit number: one gather
            first = np.zeros(hi - lo + 1, dtype=np.int64)
            first[self.units - lo] = starts
            self.src = first[np.asarray(unit_ids, dtype=np.int64) - lo] + rows
            return
        sorter = np.argsort(self.units, kind="stable")
        self.src = starts[sorter][np.searchsorted(self.units[sorter], unit_ids)] + rows

    def piece(self, lo: int, hi: int) -> list[Any]:
        """Places ``lo`` to ``hi`` of the window, column by column: numpy arrays of their
        own (numbers) and Arrow arrays (text)."""
        assert self.src is not None
        src = self.src[lo:hi]
        texts = iter(self.texts.piece(src) if self.texts is not None else [])
        out: list[Any] = []
        for col, text in zip(self.columns, self.text):
            if text:
                out.append(next(texts))
            elif col is not None:
                values = np.empty((len(src), *col.shape[1:]), dtype=col.dtype)
                np.take(col, src, axis=0, out=values, mode="clip")  # "raise" would buffer `out`
                out.append(values)
        return out


class Filling:
    """An :class:`ArrivalWindow` being filled on ``pool``: its units are read and written
    by pool tasks, submitted ahead under a budget of bytes, then all at once when the
    window is needed.

    Args:
        win: the window.
        units: its units, in the order to read them.
        fill: reads one unit and adds it to ``win``.
        size: a unit's estimated decoded bytes.
    """

    def __init__(
        self,
        win: ArrivalWindow,
        units: list[int],
        fill: Callable[[int], None],
        size: Callable[[int], int],
        pool: Executor,
    ) -> None:
        self.win = win
        self.todo = list(reversed(units))
        self.fill, self.size, self.pool = fill, size, pool
        self.futures: list[Future[None]] = []

    def ahead(self, budget: int) -> None:
        """Submit the next units while their bytes fit ``budget`` (at least one)."""
        held = 0
        while self.todo and (not self.futures or held + self.size(self.todo[-1]) <= budget):
            held += self.size(self.todo[-1])
            self.futures.append(self.pool.submit(self.fill, self.todo.pop()))

    def wait(self) -> ArrivalWindow:
        """Every unit read and written (a unit's read error is raised here)."""
        while self.todo:
            self.futures.append(self.pool.submit(self.fill, self.todo.pop()))
        for f in self.futures:
            f.result()
        return self.win

    def cancel(self) -> None:
        """Cancel what has not started."""
        self.todo.clear()
        for f in self.futures:
            f.cancel()
