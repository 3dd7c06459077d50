"""A worker's rows cut into pieces of whole batches, the same way on both paths.

The plan's windows are taken one after the other and cut into pieces of about
``PIECE_ROWS`` rows (whole batches, and about ``PIECE_BYTES`` for wide rows), so no batch
straddles two pieces; a piece spanning two windows is one gather of both. Each piece is
the list of its parts, ``(window, lo, hi)``; the in-process path makes pieces on its
pool, the DataLoader-worker path one after the other.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa

from shardwise.errors import PlanError
from shardwise.loader.batches.gather import Views
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.windows import Window, WindowBuilder, WindowOrder
from shardwise.plan.compose import WorkerWindows

__all__ = [
    "PIECE_BYTES",
    "PIECE_ROWS",
    "Parts",
    "PlanWindows",
    "cut_pieces",
    "iter_pieces",
    "joined",
    "piece_parts",
    "piece_size",
    "plan_windows",
    "row_bytes",
]

PIECE_ROWS = 16384  # rows per piece (in whole batches)
PIECE_BYTES = 16 << 20  # ... and at most about this many (estimated) bytes, for wide rows
Parts = list[tuple[Window, int, int]]  # a piece: (window, lo, hi) of each window it takes


class PlanWindows:
    """A worker's windows in the plan's order, each window's order worked out when it is
    first asked for (the rest window's, of a plan with head windows, after the first
    piece of heads is queued). The units of every window are known from the start."""

    def __init__(self, reading: Reading, wp: WorkerWindows) -> None:
        self.units = wp.window_units()
        self._orders = wp.iter_windows()
        self._made: list[WindowOrder] = []
        self._batch = reading.batch_size if reading.batch_format is not None else None

    def __len__(self) -> int:
        return len(self.units)

    def __getitem__(self, w: int) -> WindowOrder:
        while len(self._made) <= w:
            self._made.append(self._order())
        return self._made[w]

    def _order(self) -> WindowOrder:
        """The next window's order."""
        order = next(self._orders, None)
        if order is None:
            raise PlanError(f"internal error: {len(self._made)} windows of {len(self.units)}")
        return order

    def lengths(self) -> Iterator[int]:
        """The windows' rows, each window's order worked out when its length is asked for;
        batches are whole (checked before the last one is cut)."""
        total = 0
        for w in range(len(self)):
            n = len(self[w][2])
            total += n
            yield n
        if next(self._orders, None) is not None:
            raise PlanError(f"internal error: more windows than the {len(self)} read ahead")
        if self._batch is not None and total % self._batch:
            left = total % self._batch
            raise PlanError(f"internal error: {left} samples left over after the last full batch")


def plan_windows(reading: Reading, wp: WorkerWindows) -> PlanWindows:
    """The worker's windows in the plan's order, each order worked out when first needed
    (see :class:`PlanWindows`)."""
    return PlanWindows(reading, wp)


def row_bytes(reading: Reading, units: Sequence[list[int]]) -> int:
    """The estimated decoded bytes of one row of the worker's units (``units`` of each
    window)."""
    every = {u for w in units for u in w}
    rows = sum(reading.unit_rows(u) for u in every)
    return max(1, sum(reading.size(u) for u in every) // max(rows, 1))


def piece_size(reading: Reading, units: Sequence[list[int]]) -> int:
    """Rows per piece: whole batches, up to ``PIECE_ROWS`` and about ``PIECE_BYTES``."""
    return reading.piece_rows(min(PIECE_ROWS, PIECE_BYTES // row_bytes(reading, units)))


def cut_pieces(
    lengths: Iterable[int], size: int, apart: bool = False, first: int | None = None
) -> list[list[tuple[int, int, int]]]:
    """The pieces of :func:`iter_pieces` as a list."""
    return list(iter_pieces(lengths, size, apart, first))


def iter_pieces(
    lengths: Iterable[int], size: int, apart: bool = False, first: int | None = None
) -> Iterator[list[tuple[int, int, int]]]:
    """Cut the rows of windows of ``lengths`` rows, taken one after the other, into pieces
    of ``size`` rows (the last one shorter); each piece as ``(window, lo, hi)`` parts.
    With ``apart`` a piece also ends where a window does (per-sample items need no whole
    batches, and a piece then never waits for the next window's units). ``first`` (whole
    batches) bounds the first piece: it then needs only the first window. A window's
    length is taken when the cut reaches it (after the pieces before it are yielded)."""
    current: list[tuple[int, int, int]] = []
    room = min(size, first) if first else size
    for w, n in enumerate(lengths):
        lo = 0
        while lo < n:
            hi = min(n, lo + room)
            current.append((w, lo, hi))
            room -= hi - lo
            lo = hi
            if room == 0 or (apart and lo == n):
                yield current
                current, room = [], size
    if current:
        yield current


def piece_parts(
    builder: WindowBuilder, windows: PlanWindows, size: int, apart: bool = False
) -> Iterator[Parts]:
    """The pieces of ``windows`` (see :func:`iter_pieces`), each window's order worked out
    and the window built by ``builder`` when a piece first needs it, and let go when the
    pieces go past it (pieces made hold their own)."""
    loaded: dict[int, Window] = {}
    first = builder.reading.first_piece(len(windows[0][2])) if len(windows) else None
    # whole units: the first piece is one batch, so the first batch waits for the window
    # and its own rows only (making a first piece of 16,384 rows of 4 columns took 38 ms)
    first = first or builder.reading.batch_size
    for piece in iter_pieces(windows.lengths(), size, apart, first):
        for w, _, _ in piece:
            if w not in loaded:
                loaded = {k: v for k, v in loaded.items() if k >= piece[0][0]}
                loaded[w] = builder.window(w, windows[w])
        yield [(loaded[w], lo, hi) for w, lo, hi in piece]


def joined(parts: Parts) -> tuple[dict[int, pa.Table], Views, np.ndarray, np.ndarray]:
    """The tables, views and order of a piece's parts as one (a unit in two windows is
    the same table)."""
    if len(parts) == 1:
        win, lo, hi = parts[0]
        return win.tables, win.views, win.unit_ids[lo:hi], win.rows[lo:hi]
    tables = {u: t for win, _, _ in parts for u, t in win.tables.items()}
    views = {k: v for win, _, _ in parts for k, v in win.views.items()}
    unit_ids = np.concatenate([win.unit_ids[lo:hi] for win, lo, hi in parts])
    rows = np.concatenate([win.rows[lo:hi] for win, lo, hi in parts])
    return tables, views, unit_ids, rows
