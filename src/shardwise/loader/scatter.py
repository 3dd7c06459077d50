"""A window's columns in plan order, built unit by unit as the units are read.

Every row of a shuffled window may land in any batch, so no batch can be made before
all of the window's units are read. Gathering pieces afterwards (one ``take`` per unit
and column for each piece of 16,384 rows: thousands of small numpy calls per window,
all after the last unit arrives) leaves the decoding threads idle while the rows are
put in order, and the gathering threads idle while the units are decoded. Here each
unit's rows are instead written to their places in window-sized columns (one numpy
scatter per unit and column, in blocks that stay in cache) on a pool thread as soon as
the unit is read, while the next units decode; once the last unit is written, pieces
and batches are views of these columns: nothing is copied again.

This is used for numpy and torch batches whose columns are numbers, fixed-size lists of
numbers, strings or binary. Strings become Python objects on the thread that read the
unit, once, in the unit's order (by Arrow's own conversion, as a scan makes them; also
for the units read before the window's order is known), and are written like numbers.
A unit all of whose rows are in the window (the usual case) is written in one pass,
its rows read in order and each stored at its place. Each unit
is let go as soon as its rows are written, so its memory serves the next units' reads.
A unit with nulls in a column of numbers (no numpy view) makes the window fall back to
gathering pieces from the unit tables, read again for that.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Executor, Future
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.errors import ShardwiseError
from shardwise.loader.gather import Views

__all__ = ["Window", "WindowColumns", "columns_ahead", "load_window", "scatterable"]

BLOCK_ROWS = 4096  # rows written per numpy call: each unit's block stays in cache


def scatterable(schema: pa.Schema, batch_format: str | None) -> bool:
    """Whether windows of ``schema`` may be built by :class:`WindowColumns`: numpy or
    torch batches of numbers, fixed-size lists of numbers, strings and binary."""
    return batch_format in ("numpy", "torch") and len(schema) > 0 and all(_kind(f.type) for f in schema)


def _kind(t: pa.DataType) -> bool:
    if _text(t):
        return True
    if pa.types.is_fixed_size_list(t):
        t = t.value_type
    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _text(t: pa.DataType) -> bool:
    return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t)


class WindowColumns:
    """The columns of one window in plan order, written unit by unit on ``pool``.

    Every column is copied from the unit's numpy views (strings and binary: arrays of
    the Python objects made when the unit was read; see
    :func:`~shardwise.loader.gather.unit_views`).

    Args:
        unit_ids, rows: the window's order (sample ``i`` is row ``rows[i]`` of unit
            ``unit_ids[i]``).
        schema: the units' schema.
        pool: where the units' rows are written.
        ready: number columns made ahead by :func:`columns_ahead`, used where their
            shape and type are the window's.
    """

    def __init__(self, unit_ids: np.ndarray, rows: np.ndarray, schema: pa.Schema, pool: Executor,
                 ready: Future[dict[int, np.ndarray]] | None = None) -> None:
        self.n = len(unit_ids)
        self.ready = ready
        self.text = [_text(f.type) for f in schema]
        self.pool = pool
        self.columns: list[np.ndarray | None] = [np.empty(self.n, dtype=object) if t else None for t in self.text]
        self.places: Future[dict[int, tuple[np.ndarray, np.ndarray]]] = pool.submit(_places, unit_ids, rows)
        self.writes: list[Future[bool]] = []

    def add(self, unit: int, views: Views) -> None:
        """Write ``unit``'s rows (from its numpy ``views``) on the pool."""
        arrays = [views.get((unit, i)) for i in range(len(self.text))]
        for i, a in enumerate(arrays):
            if isinstance(a, np.ndarray) and self.columns[i] is None:  # made lazily: filled by the writers
                self.columns[i] = self._column(i, a)
        self.writes.append(self.pool.submit(self._write, unit, arrays))

    def _column(self, i: int, a: np.ndarray) -> np.ndarray:
        """A new column ``i`` for values like ``a``: the one made ahead, if it fits."""
        shape = (self.n, *a.shape[1:])
        made = self.ready.result().get(i) if self.ready is not None else None
        if made is not None and made.shape == shape and made.dtype == a.dtype:
            return made
        return _empty(shape, a.dtype)

    def _write(self, unit: int, arrays: list[np.ndarray | None]) -> bool:
        places = self.places.result().get(unit)
        if places is None:
            return True
        at, picked = places
        whole = _each_row_once(at, picked, len(arrays[0]) if arrays and arrays[0] is not None else -1)
        for a, out in zip(arrays, self.columns):
            if a is None or out is None or a.dtype != out.dtype or a.shape[1:] != out.shape[1:]:
                return False
            if whole is not None:
                out[whole] = a
            else:
                _scatter(out, a, at, picked)
        return True

    def result(self) -> list[np.ndarray] | None:
        """The finished columns, or None when some unit could not be written (the
        caller gathers the window's pieces instead)."""
        ok = all([f.result() for f in self.writes])  # wait for every write, even after a failure
        if not ok or any(c is None for c in self.columns):
            return None
        return [c for c in self.columns if c is not None]

    def cancel(self) -> None:
        """Cancel the writes not started yet."""
        for f in self.writes:
            f.cancel()


def _each_row_once(at: np.ndarray, picked: np.ndarray, n: int) -> np.ndarray | None:
    """Where each of a unit's ``n`` rows goes when the window holds every one of them
    once (it is then written in one pass), else None (some are elsewhere, or repeated)."""
    if len(picked) != n:
        return None
    seen = np.zeros(n, dtype=np.bool_)
    seen[picked] = True
    if not seen.all():  # a repeated source's unit: some rows twice, some not at all
        return None
    where = np.empty(n, dtype=np.intp)
    where[picked] = at
    return where


def _scatter(out: np.ndarray, a: np.ndarray, at: np.ndarray, picked: np.ndarray) -> None:
    """``out[at] = a[picked]`` for some of a unit's rows, in blocks of rows that stay in cache."""
    scratch = np.empty((min(BLOCK_ROWS, len(at)), *a.shape[1:]), dtype=a.dtype)
    for s in range(0, len(at), BLOCK_ROWS):
        part = scratch[: len(at[s : s + BLOCK_ROWS])]
        np.take(a, picked[s : s + BLOCK_ROWS], axis=0, out=part, mode="clip")  # "raise" buffers `out`
        out[at[s : s + BLOCK_ROWS]] = part


def _empty(shape: tuple[int, ...], dtype: np.dtype[Any]) -> np.ndarray:
    """A new array for a window's column; one of numbers has its pages mapped at once
    (``MAP_POPULATE``, on the training thread or ahead on a thread of its own, see
    :func:`columns_ahead`) instead of faulted in one by one by the writers: on the 2-core benchmark machine that
    took the window's kernel time from 0.6-1.5 to 0.3-0.5 CPU s per GB."""
    nbytes = int(np.prod(shape)) * dtype.itemsize
    if dtype.hasobject or nbytes == 0 or not hasattr(mmap, "MAP_POPULATE"):
        return np.empty(shape, dtype=dtype)
    flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | mmap.MAP_POPULATE
    return np.frombuffer(mmap.mmap(-1, nbytes, flags=flags), dtype=dtype).reshape(shape)


def columns_ahead(n: int, first: Future[tuple[pa.Table, Views]], unit: int) -> dict[int, np.ndarray]:
    """The number columns of a window of ``n`` rows whose first unit ``unit`` is being
    read (``first``), by column: started before the window's order is worked out, their
    pages are mapped on a thread of their own while the training thread works it out
    (instead of after it, while the decoding threads wait for the order). None are
    made when that unit cannot be read (its error is raised where it is taken)."""
    try:
        table, views = first.result()
    except (ShardwiseError, CancelledError):  # cancelled: read again where it is taken
        return {}
    out: dict[int, np.ndarray] = {}
    for i, f in enumerate(table.schema):
        view = views.get((unit, i))
        if not _text(f.type) and view is not None and not view.dtype.hasobject:
            out[i] = _empty((n, *view.shape[1:]), view.dtype)
    return out


def _places(unit_ids: np.ndarray, rows: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """For each unit: where its samples go in the window, and which of its rows they are."""
    units, counts = _units_of(unit_ids)
    if len(units) <= 1 << 16:  # the window's own unit numbers: numpy sorts 16-bit keys by radix, 2x faster
        order = np.argsort(_ranks(units, unit_ids), kind="stable")
    else:
        order = np.argsort(unit_ids, kind="stable")
    ends = np.cumsum(counts).tolist()
    out: dict[int, Any] = {}
    for u, a, b in zip(units.tolist(), [0, *ends[:-1]], ends):
        at = order[a:b]
        out[u] = (at, rows[at])
    return out


def _ranks(units: np.ndarray, unit_ids: np.ndarray) -> np.ndarray:
    """Each sample's unit as its rank among the window's (at most 2**16) ``units``: by a
    lookup table when unit numbers are not much larger than the window, else by search."""
    if len(units) and int(units[-1]) < 4 * len(unit_ids) + (1 << 16):
        rank = np.zeros(int(units[-1]) + 1, dtype=np.uint16)
        rank[units] = np.arange(len(units))
        return rank[unit_ids]
    return np.searchsorted(units, unit_ids).astype(np.uint16)


def _units_of(unit_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The window's units (ascending) and their samples: counted (one pass, no sort)
    when unit numbers are not much larger than the window."""
    if len(unit_ids) and int(unit_ids.max()) < 4 * len(unit_ids) + (1 << 16) and int(unit_ids.min()) >= 0:
        counts = np.bincount(unit_ids)
        units = np.flatnonzero(counts)
        return units, counts[units]
    units, counts = np.unique(unit_ids, return_counts=True)
    return units, counts


@dataclass
class Window:
    """A window's order, and either its unit tables and views (gathered by pieces) or
    its columns in plan order (see :mod:`shardwise.loader.scatter`)."""

    unit_ids: np.ndarray
    rows: np.ndarray
    tables: dict[int, pa.Table] = field(default_factory=dict)
    views: Views = field(default_factory=dict)
    columns: list[np.ndarray] | None = None
    schema: pa.Schema | None = None


def load_window(window: tuple[list[int], np.ndarray, np.ndarray], units: Iterator[tuple[pa.Table, Views]],
                 pool: Executor, batch_format: str | None,
                 reload: Callable[[int], tuple[pa.Table, Views]],
                 ready: Future[dict[int, np.ndarray]] | None = None) -> Window:
    """Takes the window's units from ``units`` (read ahead on ``pool``) and, where
    :func:`scatterable`, writes their rows into columns in plan order (those ``ready``
    where they fit) as they arrive,
    letting each unit go once its rows are written (its memory then serves the next
    units' reads). A window that cannot be built so is gathered by pieces: its units
    are read again with ``reload``."""
    unit_list, unit_ids, rows = window
    win = Window(unit_ids, rows)
    build: WindowColumns | None = None
    try:
        for u in unit_list:
            table, views = next(units)
            win.schema = table.schema
            if build is None and not win.tables and scatterable(win.schema, batch_format):
                build = WindowColumns(unit_ids, rows, win.schema, pool, ready)
            if build is not None:
                build.add(u, views)
            else:
                win.tables[u] = table
                win.views.update(views)
            del table, views
        win.columns = build.result() if build is not None else None
    finally:
        if build is not None and win.columns is None:
            build.cancel()
    if build is not None and win.columns is None:  # rare: nulls in a column of numbers
        for u in unit_list:
            win.tables[u], views = reload(u)
            win.views.update(views)
    return win
