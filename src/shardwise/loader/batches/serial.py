"""Samples or batches of one worker's plan made on one thread: the path of a DataLoader
worker (and of per-sample datasets iterated in the training process).

Windows and pieces are the batch builder's (:mod:`shardwise.loader.batches.windows`,
:mod:`shardwise.loader.batches.pieces`): units are read ahead on two threads under
``prefetch_bytes``, and each piece is gathered, converted and cut into batches here.
Rows are gathered a piece at a time, straight from the unit tables: a whole-window
gather would stall this worker (and with it the DataLoader's round-robin) and hold a
second copy of the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from shardwise.loader.batches.pieces import gather_piece, piece_parts, piece_size, plan_windows
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.samples import rows
from shardwise.loader.batches.split import Travel, split
from shardwise.loader.batches.windows import WindowBuilder
from shardwise.plan.compose import WorkerWindows

__all__ = ["serial_items"]


def serial_items(
    reading: Reading, wp: WorkerWindows, travel: Travel | None = None
) -> Iterator[tuple[Any, int]]:
    """Samples (per-sample mode) or batches, each with its number of samples; numpy
    batches are handed to ``travel`` when given (see :mod:`shardwise.loader.batches.split`)."""
    fmt = reading.batch_format
    for piece in _pieces(reading, wp):
        if fmt is None:
            for batch in piece.to_batches(max_chunksize=1024):
                for row in rows(batch):
                    yield row, 1
            continue
        for batch in split(piece, reading.batch_size, fmt, reading.pad_to, travel):
            yield batch, reading.batch_size


def _pieces(reading: Reading, wp: WorkerWindows) -> Iterator[pa.Table]:
    """The worker's rows in plan order, a piece of whole batches at a time."""
    builder = WindowBuilder(reading, wp)
    try:
        windows = plan_windows(reading, wp)
        size, apart = piece_size(reading, windows), reading.batch_format is None
        for parts in piece_parts(builder, windows, size, apart):
            yield gather_piece(parts)
    finally:
        builder.close()
