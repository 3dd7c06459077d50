"""The in-process fast path: batches made on a few native threads of the training process.

Iterating a batched dataset in the training process (``for batch in ds:``,
``DataLoader(ds, batch_size=None, num_workers=0)``, or ``iter_shard``) sends nothing
between processes. One pool of ``num_threads`` threads does the work that releases the
GIL: it decodes units (Arrow) and, for numpy and torch batches of numbers, fixed-size
lists and strings, writes each unit's rows straight to their places in columns of the
whole window in plan order as soon as the unit is read, then lets the unit go (see
:mod:`shardwise.loader.scatter`); pieces of about 16,384 rows (whole batches) are then
views of those columns. Other windows (Arrow batches, variable-length lists, a unit
with nulls in a column of numbers) are gathered a piece at a time on the pool (numpy
``take`` per unit, then into order) and converted. The training thread only cuts
batches out of finished pieces, as views: ``batch["x"]`` of a numpy batch is a slice of
the piece's array, and a torch batch's tensors share the piece's buffers
(``torch.from_numpy`` once per piece), so nothing is copied after the gather. Pieces
are cut on the worker's grid of batches, so no batch straddles two pieces; a piece
spanning two windows is joined once.

Units are read ahead, ``2 * num_threads`` at a time under ``prefetch_bytes``, the first ones
while the training thread works out the plan's order (on a fresh start); at most
``2 * num_threads`` pieces are gathered ahead. As each unit is read, its string columns
become Python objects on that thread, once (for numpy and torch batches). Leaving the
loop early (``break``, then the iterator is garbage-collected) cancels what is queued
and joins the threads; an error on a thread (a unit that cannot be read) is raised in
the training loop as the :class:`~shardwise.errors.FormatError` naming file and unit.
The batches are exactly those of the worker path for ``num_workers=1``.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Generator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.errors import PlanError
from shardwise.loader.convert import column_to_numpy, is_ragged, pad, torch_other
from shardwise.loader.gather import Views, column_to_arrow, gather_columns, unit_views
from shardwise.loader.scatter import Window, columns_ahead, load_window
from shardwise.loader.stream import Reading
from shardwise.loader.transport import NumpyColumn
from shardwise.plan.compose import WindowSource

__all__ = ["threaded_batches"]

_log = logging.getLogger(__name__)
PIECE_ROWS = 16384  # rows per piece (in whole batches): 4x the worker path's, for fewer, larger takes
_Loaded = tuple[pa.Table, Views]  # a unit's table and what gathers take from it
Part = tuple[dict[int, pa.Table], Views, np.ndarray, np.ndarray]  # unit tables, views, unit ids, rows


@dataclass
class Piece:
    """Rows of whole batches, converted: batches are cut out of it as views."""

    rows: int
    arrays: dict[str, Any] = field(default_factory=dict)  # numpy arrays or torch tensors
    ragged: dict[str, pa.Array] = field(default_factory=dict)  # padded per batch
    arrow: pa.RecordBatch | None = None


def threaded_batches(reading: Reading, wp: WindowSource) -> Iterator[tuple[Any, int]]:
    """The batches of ``wp`` made on ``reading.num_threads`` threads, each with its size."""
    maker = _Maker(reading)
    pool = ThreadPoolExecutor(reading.num_threads, thread_name_prefix="shardwise-loader")
    load = _unit_loader(reading)
    early = _read_early(reading, wp, pool, load)
    ahead, ready = _columns_ahead(reading, wp, early)
    units: Generator[tuple[pa.Table, Views], None, None] | None = None
    pending: deque[Future[Piece]] = deque()
    try:
        windows = list(wp.iter_windows())  # the plan's order, worked out while the first units are read
        lengths = [len(order) for _, _, order in windows]
        if sum(lengths) % reading.batch_size:
            raise PlanError(f"internal error: {sum(lengths) % reading.batch_size} samples left over "
                            "after the last full batch")
        units = reading.prefetcher(_reuse(early, load), _ahead(reading), executor=pool).iterate(
            [u for w in windows for u in w[0]])
        loaded: dict[int, Window] = {}  # window -> its tables or columns, while needed
        for piece in cut_pieces(lengths, reading.piece_rows(PIECE_ROWS)):
            for w, _, _ in piece:
                if w not in loaded:  # earlier windows are done: in-flight pieces hold their own
                    loaded = {k: v for k, v in loaded.items() if k >= piece[0][0]}
                    loaded[w] = load_window(windows[w], units, pool, reading.batch_format, load, ready)
                    ready = None  # columns made ahead are the first window's (or nobody's)
            if all(loaded[w].columns is not None for w, _, _ in piece):
                done: Future[Piece] = Future()
                done.set_result(maker.cut([(loaded[w], lo, hi) for w, lo, hi in piece]))
                pending.append(done)
            else:
                pending.append(pool.submit(maker.make_mixed, [(loaded[w], lo, hi) for w, lo, hi in piece]))
            while len(pending) > 2 * reading.num_threads:
                yield from maker.batches(pending.popleft().result())
        while pending:
            yield from maker.batches(pending.popleft().result())
    finally:
        for fut in pending:
            fut.cancel()
        if units is not None:
            units.close()
        pool.shutdown(wait=True, cancel_futures=True)  # also what was read early and not used
        if ahead is not None:
            ahead.shutdown(wait=True)


def _read_early(reading: Reading, wp: WindowSource, pool: ThreadPoolExecutor,
                load: Callable[[int], _Loaded]) -> dict[int, Future[_Loaded]]:
    """Start reading the worker's first units (under ``prefetch_bytes``) before its order
    is worked out, on a fresh start (a resumed worker may skip its first units)."""
    early: dict[int, Future[_Loaded]] = {}
    if wp.skip:
        return early
    held = 0
    for u in wp.units()[: 2 * reading.interleave + 2]:  # the pool would idle until the order is known
        held += reading.size(u)
        if early and held > reading.prefetch_bytes:
            break
        early[u] = pool.submit(load, u)
    return early


def _columns_ahead(reading: Reading, wp: WindowSource, early: dict[int, Future[_Loaded]]
                   ) -> tuple[ThreadPoolExecutor | None, Future[dict[int, np.ndarray]] | None]:
    """On a fresh start of a worker whose units all fit one window (its rows: the
    window's), the window's number columns made on a thread of its own (mapping their
    pages is about 0.35 CPU s per GB) while the training thread works out the order:
    that thread, and the decoding threads once the early reads are done, would otherwise
    run alone. Returns the thread's pool (to shut down) and the columns."""
    if not early or reading.batch_format not in ("numpy", "torch") or len(wp.units()) > reading.interleave:
        return None, None
    first = next(iter(early))
    ahead = ThreadPoolExecutor(1, thread_name_prefix="shardwise-columns")
    return ahead, ahead.submit(columns_ahead, wp.num_samples, early[first], first)


def _ahead(reading: Reading) -> int:
    """Units read ahead at a time: enough to keep the threads busy. Each one read and
    not yet written to its window is memory the allocator must find; with many ahead it
    took fresh (huge) pages for them, about 0.2 CPU s of kernel time per GB read."""
    return 2 * reading.num_threads


def _reuse(early: dict[int, Future[_Loaded]], load: Callable[[int], _Loaded]) -> Callable[[int], _Loaded]:
    """``load``, taking a unit read early where there is one (once)."""
    def load_unit(u: int) -> _Loaded:
        fut = early.pop(u, None)
        if fut is None or fut.cancel():  # not read early, or not started yet: read it here
            return load(u)
        return fut.result()  # running on another thread, or done

    return load_unit


def _unit_loader(reading: Reading) -> Callable[[int], _Loaded]:
    """Reads a unit and prepares what gathers and window columns take from it (its
    numeric views and, for numpy and torch batches, its strings as Python objects) on
    the reading thread, also while the window's order is still being worked out. A
    column that became Python objects is not kept twice: its Arrow data is let go."""
    load = reading.loader()
    objects = reading.batch_format != "arrow"

    def load_unit(u: int) -> _Loaded:
        table = load(u)
        views = unit_views({u: table}, u, objects)
        for i, f in enumerate(table.schema):
            view = views[(u, i)]
            if view is not None and view.dtype == object:  # gathers take the objects only
                table = table.set_column(i, f, pa.nulls(table.num_rows, f.type))
        return table, views

    return load_unit


def cut_pieces(lengths: list[int], size: int) -> list[list[tuple[int, int, int]]]:
    """Cut the rows of windows of ``lengths`` rows, taken one after the other, into pieces
    of ``size`` rows (the last one shorter); each piece as ``(window, lo, hi)`` parts."""
    pieces: list[list[tuple[int, int, int]]] = []
    current: list[tuple[int, int, int]] = []
    room = size
    for w, n in enumerate(lengths):
        lo = 0
        while lo < n:
            hi = min(n, lo + room)
            current.append((w, lo, hi))
            room -= hi - lo
            lo = hi
            if room == 0:
                pieces.append(current)
                current, room = [], size
    if current:
        pieces.append(current)
    return pieces


class _Maker:
    """Gathers and converts pieces (on pool threads) and cuts them into batches."""

    def __init__(self, reading: Reading) -> None:
        self.fmt = reading.batch_format
        self.size = reading.batch_size
        self.pad_to = reading.pad_to
        self.pin = reading.pin_memory and self.fmt == "torch" and _cuda()
        if reading.pin_memory and not self.pin:
            _log.info("pin_memory=True has no effect here: batches are pinned only as torch "
                      "tensors with CUDA available")

    def cut(self, parts: list[tuple[Window, int, int]]) -> Piece:
        """A piece of windows built in plan order: views of their columns (one copy
        where a piece spans two windows)."""
        win = parts[0][0]
        assert win.schema is not None
        if len(parts) == 1:
            columns = [c[parts[0][1] : parts[0][2]] for c in win.columns or []]
        else:
            columns = [np.concatenate([(w.columns or [])[i][lo:hi] for w, lo, hi in parts])
                       for i in range(len(win.schema))]
        piece = Piece(sum(hi - lo for _, lo, hi in parts))
        piece.arrays = {f.name: self._package(c) for f, c in zip(win.schema, columns)}
        return piece

    def make_mixed(self, parts: list[tuple[Window, int, int]]) -> Piece:
        """A piece from windows gathered by pieces (and perhaps windows built in order:
        made apart and joined)."""
        if all(w.columns is None for w, _, _ in parts):
            return self.make([(w.tables, w.views, w.unit_ids[lo:hi], w.rows[lo:hi]) for w, lo, hi in parts])
        subs = [self.cut([p]) if p[0].columns is not None else self.make_mixed([p]) for p in parts]
        piece = Piece(sum(s.rows for s in subs))
        for name in subs[0].arrays:
            values = [s.arrays[name] for s in subs]
            piece.arrays[name] = self._package(np.concatenate([np.asarray(v) for v in values]))
        return piece

    def make(self, parts: list[Part]) -> Piece:
        """Gather ``parts`` into one piece and convert its columns once."""
        if len(parts) == 1:
            tables, views, unit_ids, order = parts[0]
        else:  # a piece across windows: one gather (a unit in both is the same table)
            tables = {u: t for p in parts for u, t in p[0].items()}
            views = {k: v for p in parts for k, v in p[1].items()}
            unit_ids, order = np.concatenate([p[2] for p in parts]), np.concatenate([p[3] for p in parts])
        schema = next(iter(tables.values())).schema
        columns = [c if isinstance(c, np.ndarray) else c.combine_chunks()
                   for c in gather_columns(tables, unit_ids, order, views, objects=self.fmt != "arrow")]
        piece = Piece(sum(len(p[2]) for p in parts))
        if self.fmt == "arrow" or not len(schema):
            arrays = [column_to_arrow(c, f.type) if isinstance(c, np.ndarray) else c
                      for c, f in zip(columns, schema)]
            piece.arrow = pa.Table.from_arrays(arrays, schema=schema).combine_chunks().to_batches()[0] \
                if len(schema) else pa.record_batch([], schema=schema)
            return piece
        for f, col in zip(schema, columns):
            if isinstance(col, np.ndarray):  # gathered into a buffer of its own: no copy
                piece.arrays[f.name] = col
            elif self.pad_to is not None and is_ragged(col.type):
                piece.ragged[f.name] = col
            else:
                piece.arrays[f.name] = np.require(column_to_numpy(col), requirements="W")
        piece.arrays = {k: self._package(v) for k, v in piece.arrays.items()}
        return piece

    def _package(self, arr: np.ndarray) -> Any:
        if self.fmt == "numpy":
            return arr.view(NumpyColumn)
        if arr.dtype.kind not in "biuf":
            return arr  # sliced per batch as on the worker path (see convert.torch_other)
        import torch

        tensor = torch.from_numpy(arr)
        return tensor.pin_memory() if self.pin else tensor

    def batches(self, piece: Piece) -> Iterator[tuple[Any, int]]:
        """The piece's batches, as views of its columns."""
        size = self.size
        for a in range(0, piece.rows, size):
            if piece.arrow is not None:
                yield (piece.arrow.slice(a, size) if piece.arrow.num_columns else piece.arrow), size
                continue
            out = {k: v[a : a + size] if self.fmt == "numpy" or not isinstance(v, np.ndarray)
                   else torch_other(v[a : a + size]) for k, v in piece.arrays.items()}
            for name, col in piece.ragged.items():
                values, lengths = pad(col.slice(a, size), self.pad_to)
                out[name], out[f"{name}_lengths"] = self._package(values), self._package(lengths)
            yield out, size


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
