"""The in-process fast path: batches made on a few native threads of the training process.

Iterating a batched dataset in the training process (``for batch in ds:``,
``DataLoader(ds, batch_size=None, num_workers=0)``, or ``iter_shard``) sends nothing
between processes. One pool of ``num_threads`` threads does the work that releases the
GIL: it reads the units and builds the windows (for numpy and torch batches of numbers,
fixed-size lists, strings and binary, as their units arrive, see
:mod:`shardwise.loader.batches.windows`), then gathers and converts pieces of whole
batches a few ahead of the training thread (:mod:`shardwise.loader.batches.piece_maker`,
the conversion the DataLoader-worker path runs on one thread).
The training thread only cuts batches out of finished pieces, as views. Arrow allocates
with jemalloc from the first batch on (:func:`~shardwise.loader.batches.memory.prefer_jemalloc`,
unless ``ARROW_DEFAULT_MEMORY_POOL`` is set).

Leaving the loop early (``break``, then the iterator is garbage-collected) cancels what
is queued and joins the threads; an error on a thread (a unit that cannot be read) is
raised in the training loop as the :class:`~shardwise.errors.FormatError` naming file and
unit. The batches are exactly those of the worker path for ``num_workers=1``.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import pyarrow as pa

from shardwise.loader.batches.memory import prefer_jemalloc
from shardwise.loader.batches.piece_maker import Piece, PieceMaker
from shardwise.loader.batches.pieces import piece_parts, piece_size, plan_windows, row_bytes
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.texts import is_text
from shardwise.loader.batches.wide import WIDE
from shardwise.loader.batches.windows import WindowBuilder
from shardwise.parallel._malloc import warm_heap
from shardwise.plan.compose import WorkerWindows

__all__ = ["object_bytes", "pacing", "threaded_batches"]

AHEAD_BYTES = 256 << 20  # pieces gathered ahead of the loop: about this many bytes, 2-8 per thread


def threaded_batches(reading: Reading, wp: WorkerWindows) -> Iterator[tuple[Any, int]]:
    """The batches of ``wp`` made on ``reading.num_threads`` threads, each with its size
    (Arrow allocating with jemalloc from now on, as in a DataLoader worker)."""
    prefer_jemalloc()
    maker = PieceMaker.of(reading)
    pool = ThreadPoolExecutor(reading.num_threads, thread_name_prefix="shardwise-loader")
    builder = WindowBuilder(reading, wp, pool)  # the first window's units are read from now
    pending: deque[Future[Piece]] = deque()
    try:
        windows = plan_windows(reading, wp)
        piece_rows, ahead = pacing(reading, windows.units)
        _warm(reading, windows.units)  # while the first window is read
        first, filling = True, True  # the first piece waited for, then those made early
        for parts in piece_parts(builder, windows, piece_rows):
            pending.append(pool.submit(maker.made, parts))
            if first and reading.first_piece(reading.batch_size) is not None:
                first = False  # head windows: the next window's reads wait for the first batch
                yield from _first_batch(maker.batches(pending.popleft().result()), builder)
                continue
            builder.read_ahead()  # the next window's reads queue behind this piece
            filling = filling and len(pending) <= ahead
            while len(pending) > ahead or (pending and (first or (filling and pending[0].done()))):
                first = False
                yield from maker.batches(pending.popleft().result())
        while pending:
            yield from maker.batches(pending.popleft().result())
    finally:
        for fut in pending:
            fut.cancel()
        builder.close()
        pool.shutdown(wait=True, cancel_futures=True)


def _first_batch(
    batches: Iterator[tuple[Any, int]], builder: WindowBuilder
) -> Iterator[tuple[Any, int]]:
    """The first piece's batches, the next window's reads started once the first is cut.

    With head windows the first piece is ready early, and cutting its first batch (a batch
    of images is 25 MB of Python ``bytes`` made on the training thread) then competed for
    the 2 cores with the rest window's reads started behind the piece: on the image shape
    the first batch came 20-37 ms after its piece (load 3.5)."""
    try:
        batch = next(batches, None)
    finally:
        builder.read_ahead()
    if batch is not None:
        yield batch
        yield from batches


def pacing(reading: Reading, units: Sequence[list[int]]) -> tuple[int, int]:
    """Rows per piece (:func:`~shardwise.loader.batches.pieces.piece_size`) and pieces
    gathered ahead of the loop (about ``AHEAD_BYTES`` or ``prefetch_bytes``, the smaller,
    and 2-8 per thread: the windows of pieces ahead are read ahead too).

    Deep enough that the pool keeps ahead although each of its threads waits for the GIL
    several times per piece while the training thread holds it (making the batches'
    strings, running the loop): with 2 pieces per thread the loop waited for pieces for
    about 0.1 s more of a text epoch of 2 s than with 8."""
    piece_rows = piece_size(reading, units)
    piece_bytes = piece_rows * row_bytes(reading, units)
    budget = min(AHEAD_BYTES, reading.prefetch_bytes)  # the user's read-ahead budget bounds it too
    per_thread = min(max(budget // piece_bytes // reading.num_threads, 2), 8)
    return piece_rows, per_thread * reading.num_threads


def _warm(reading: Reading, units: Sequence[list[int]]) -> None:
    """Warm the training thread's heap for a batch's wide objects
    (:func:`~shardwise.parallel._malloc.warm_heap`), unless ``SHARDWISE_KEEP_FREED=0``
    leaves this process's allocator alone (as for batches received from workers)."""
    if os.environ.get("SHARDWISE_KEEP_FREED", "1") != "0":
        warm_heap(object_bytes(reading, units))


def object_bytes(reading: Reading, units: Sequence[list[int]]) -> int:
    """The bytes of the Python objects a batch makes on the training thread, where they
    are wide (:data:`~shardwise.loader.batches.wide.WIDE` bytes a row or more: images,
    audio): its rows' stored bytes; else 0 (numbers are views, narrow strings come from
    Python's own small-object memory)."""
    if reading.batch_format == "arrow":
        return 0
    if not any(is_text(f.type) or pa.types.is_struct(f.type) for f in reading.schema()):
        return 0
    per_row = row_bytes(reading, units) // 2  # stored bytes (row_bytes estimates decoded ones)
    return reading.batch_size * per_row if per_row >= WIDE else 0
