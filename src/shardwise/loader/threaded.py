"""The in-process fast path: batches made on a few native threads of the training process.

Iterating a batched dataset in the training process (``for batch in ds:``,
``DataLoader(ds, batch_size=None, num_workers=0)``, or ``iter_shard``) sends nothing
between processes. One pool of ``num_threads`` threads does the work that releases the
GIL. For numpy and torch batches of numbers, fixed-size lists, strings and binary, it
decodes each unit and copies its rows into the window's columns at the unit's own place
(see :mod:`shardwise.loader.arrival`), then lets the unit go; the first window's units
are read from the start, while the training thread works out the plan's order. Once a
window is complete, pieces of about 16,384 rows (whole batches) are gathered on the
pool, one ``take`` per column, a few pieces ahead of the training thread. Other windows
(Arrow batches, variable-length lists, a unit with nulls in a column of numbers) keep
their unit tables and are gathered a piece at a time (numpy ``take`` per unit, then
into order). The training thread only cuts batches out of finished pieces, as views:
``batch["x"]`` of a numpy batch is a slice of the piece's array, and a torch batch's
tensors share the piece's buffers (``torch.from_numpy`` once per piece), so nothing is
copied after the gather. Strings and binary values stay Arrow in windows and pieces;
each batch's become Python objects on the training thread as the batch is cut (see
:mod:`shardwise.loader.texts`). Pieces are cut on the worker's grid of batches, so no
batch straddles two pieces; a piece spanning two windows is joined once.

The next window's first units are read ahead under ``prefetch_bytes`` once a window is
in use. Leaving the loop early (``break``, then the iterator is garbage-collected)
cancels what is queued and joins the threads; an error on a thread (a unit that cannot
be read) is raised in the training loop as the :class:`~shardwise.errors.FormatError`
naming file and unit. The batches are exactly those of the worker path for
``num_workers=1``.
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
from shardwise.loader.stream import Reading
from shardwise.loader.texts import batch_objects, is_text, large_text
from shardwise.loader.transport import NumpyColumn
from shardwise.loader.windows import Fills, Loaded, Window, load_window
from shardwise.plan.compose import WindowSource

__all__ = ["threaded_batches"]

_log = logging.getLogger(__name__)
PIECE_ROWS = (
    16384  # rows per piece (in whole batches): 4x the worker path's, for fewer, larger takes
)
PIECE_BYTES = 16 << 20  # ... and at most about this many (estimated) bytes, for wide rows
AHEAD_BYTES = 256 << 20  # pieces gathered ahead of the loop: about this many bytes, 2-8 per thread
Part = tuple[
    dict[int, pa.Table], Views, np.ndarray, np.ndarray
]  # unit tables, views, unit ids, rows


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
    fills = Fills(reading, wp, pool, load)
    units: Generator[tuple[pa.Table, Views], None, None] | None = None
    pending: deque[Future[Piece]] = deque()
    try:
        windows = list(
            wp.iter_windows()
        )  # the plan's order, worked out while the first units are read
        lengths = [len(order) for _, _, order in windows]
        if sum(lengths) % reading.batch_size:
            raise PlanError(
                f"internal error: {sum(lengths) % reading.batch_size} samples left over "
                "after the last full batch"
            )
        if not fills.on:
            units = reading.prefetcher(load, 2 * reading.num_threads, executor=pool).iterate(
                [u for w in windows for u in w[0]]
            )
        piece_rows, ahead = pacing(reading, windows)
        loaded: dict[int, Window] = {}  # window -> its columns or tables, while needed
        for piece in cut_pieces(lengths, piece_rows):
            for w, _, _ in piece:
                if w not in loaded:  # earlier windows are done: in-flight pieces hold their own
                    loaded = {k: v for k, v in loaded.items() if k >= piece[0][0]}
                    loaded[w] = (
                        fills.window(w, windows[w])
                        if units is None
                        else load_window(windows[w], units)
                    )
            pending.append(pool.submit(maker.made, [(loaded[w], lo, hi) for w, lo, hi in piece]))
            while len(pending) > ahead:
                yield from maker.batches(pending.popleft().result())
        while pending:
            yield from maker.batches(pending.popleft().result())
    finally:
        for fut in pending:
            fut.cancel()
        fills.cancel()
        if units is not None:
            units.close()
        pool.shutdown(wait=True, cancel_futures=True)


def _unit_loader(reading: Reading) -> Callable[[int], Loaded]:
    """Reads a unit and prepares the numeric views that gathers and window columns take
    from it, on the reading thread (also while the window's order is still being worked
    out). Strings and binary values stay Arrow (see :mod:`shardwise.loader.texts`)."""
    load = reading.loader()

    def load_unit(u: int) -> Loaded:
        table = load(u)
        return table, unit_views({u: table}, u)

    return load_unit


def pacing(
    reading: Reading, windows: list[tuple[list[int], np.ndarray, np.ndarray]]
) -> tuple[int, int]:
    """Rows per piece (whole batches, up to ``PIECE_ROWS`` and about ``PIECE_BYTES``) and
    pieces gathered ahead of the loop (about ``AHEAD_BYTES`` or ``prefetch_bytes``, the
    smaller, and 2-8 per thread: the windows of pieces ahead are read ahead too).

    Deep enough that the pool keeps ahead although each of its threads waits for the GIL
    several times per piece while the training thread holds it (making the batches'
    strings, running the loop): with 2 pieces per thread the loop waited for pieces for
    about 0.1 s more of a text epoch of 2 s than with 8."""
    units = {u for w in windows for u in w[0]}
    rows = sum(reading.index.units[u].num_samples for u in units)
    row_bytes = max(1, sum(reading.size(u) for u in units) // max(rows, 1))
    piece_rows = reading.piece_rows(min(PIECE_ROWS, PIECE_BYTES // row_bytes))
    budget = min(AHEAD_BYTES, reading.prefetch_bytes)  # the user's read-ahead budget bounds it too
    per_thread = min(max(budget // (piece_rows * row_bytes) // reading.num_threads, 2), 8)
    return piece_rows, per_thread * reading.num_threads


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
            _log.info(
                "pin_memory=True has no effect here: batches are pinned only as torch "
                "tensors with CUDA available"
            )

    def made(self, parts: list[tuple[Window, int, int]]) -> Piece:
        """A piece (on a pool thread), its columns of numbers already cut into the
        batches' views (the training thread then only picks them)."""
        piece = self.make_mixed(parts)
        size = self.size
        for k, v in piece.arrays.items():
            if isinstance(v, pa.Array):
                continue  # text: Python objects are made as each batch is cut
            if not isinstance(v, np.ndarray):  # a tensor
                piece.arrays[k] = list(v.split(size))
            elif self.fmt == "numpy":
                piece.arrays[k] = [v[a : a + size] for a in range(0, piece.rows, size)]
            else:
                piece.arrays[k] = [torch_other(v[a : a + size]) for a in range(0, piece.rows, size)]
        return piece

    def make_mixed(self, parts: list[tuple[Window, int, int]]) -> Piece:
        """A piece from windows built as their units arrived or gathered by pieces (each
        part made apart, then joined)."""
        if all(w.arrival is None for w, _, _ in parts):
            return self.make(
                [(w.tables, w.views, w.unit_ids[lo:hi], w.rows[lo:hi]) for w, lo, hi in parts]
            )
        subs = [self.taken(p) if p[0].arrival is not None else self.make_mixed([p]) for p in parts]
        if len(subs) == 1:
            return subs[0]
        piece = Piece(sum(s.rows for s in subs))
        for name in subs[0].arrays:
            values = [s.arrays[name] for s in subs]
            piece.arrays[name] = (
                _join(values)
                if isinstance(values[0], pa.Array)
                else self._package(np.concatenate([np.asarray(v) for v in values]))
            )
        return piece

    def taken(self, part: tuple[Window, int, int]) -> Piece:
        """A piece of a window built as its units arrived: one take per column."""
        win, lo, hi = part
        assert win.arrival is not None and win.schema is not None
        piece = Piece(hi - lo)
        for f, values in zip(win.schema, win.arrival.piece(lo, hi)):
            piece.arrays[f.name] = values if isinstance(values, pa.Array) else self._package(values)
        return piece

    def make(self, parts: list[Part]) -> Piece:
        """Gather ``parts`` into one piece and convert its columns once (text stays
        Arrow until a batch is cut)."""
        if len(parts) == 1:
            tables, views, unit_ids, order = parts[0]
        else:  # a piece across windows: one gather (a unit in both is the same table)
            tables = {u: t for p in parts for u, t in p[0].items()}
            views = {k: v for p in parts for k, v in p[1].items()}
            unit_ids, order = (
                np.concatenate([p[2] for p in parts]),
                np.concatenate([p[3] for p in parts]),
            )
        schema = next(iter(tables.values())).schema
        columns = [
            c if isinstance(c, np.ndarray) else c.combine_chunks()
            for c in gather_columns(tables, unit_ids, order, views)
        ]
        piece = Piece(sum(len(p[2]) for p in parts))
        if self.fmt == "arrow" or not len(schema):
            arrays = [
                column_to_arrow(c, f.type) if isinstance(c, np.ndarray) else c
                for c, f in zip(columns, schema)
            ]
            piece.arrow = (
                pa.Table.from_arrays(arrays, schema=schema).combine_chunks().to_batches()[0]
                if len(schema)
                else pa.record_batch([], schema=schema)
            )
            return piece
        for f, col in zip(schema, columns):
            if isinstance(col, np.ndarray):  # gathered into a buffer of its own: no copy
                piece.arrays[f.name] = self._package(col)
            elif self.pad_to is not None and is_ragged(col.type):
                piece.ragged[f.name] = col
            elif is_text(col.type):
                piece.arrays[f.name] = col
            else:
                piece.arrays[f.name] = self._package(
                    np.require(column_to_numpy(col), requirements="W")
                )
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
            i = a // size
            out = {
                k: v[i] if type(v) is list else self._objects(v, a, size)
                for k, v in piece.arrays.items()
            }
            for name, col in piece.ragged.items():
                values, lengths = pad(col.slice(a, size), self.pad_to)
                out[name], out[f"{name}_lengths"] = self._package(values), self._package(lengths)
            yield out, size

    def _objects(self, values: pa.Array, a: int, size: int) -> np.ndarray:
        """Rows ``a`` to ``a + size`` of a piece's text, as Python objects made now."""
        objects = batch_objects(values.slice(a, size))
        return objects.view(NumpyColumn) if self.fmt == "numpy" else objects


def _join(values: list[pa.Array]) -> pa.Array:
    """Text of consecutive parts as one array (of large offsets where the parts' differ)."""
    if len(values) == 1:
        return values[0]
    if any(v.type != values[0].type for v in values):
        values = [v.cast(large_text(v.type)) for v in values]
    return pa.concat_arrays(values)


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())
