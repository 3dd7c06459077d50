"""Samples or batches of one worker's plan made on one thread: the path of a DataLoader
worker (and of per-sample datasets iterated in the training process).

Windows, pieces and their conversion are the batch builder's
(:mod:`shardwise.loader.batches.windows`, :mod:`shardwise.loader.batches.pieces`,
:mod:`shardwise.loader.batches.piece_maker`), the same as the in-process path's: units
are read ahead on two threads under ``prefetch_bytes``, and each piece is gathered,
converted and cut into batches here. Rows are gathered a piece at a time, straight from
the unit tables: a whole-window gather would stall this worker (and with it the
DataLoader's round-robin) and hold a second copy of the window.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shardwise.loader.batches.piece_maker import PieceMaker, Travel
from shardwise.loader.batches.pieces import piece_parts, piece_size, plan_windows
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.samples import rows
from shardwise.loader.batches.windows import WindowBuilder
from shardwise.plan.compose import WorkerWindows

__all__ = ["serial_items"]

SAMPLE_CHUNK = 1024  # per-sample rows are made into Python objects this many at a time


def serial_items(
    reading: Reading, wp: WorkerWindows, travel: Travel | None = None
) -> Iterator[tuple[Any, int]]:
    """Samples (per-sample mode) or batches, each with its number of samples; numpy and
    torch batches, and samples, are handed to ``travel`` when given (see
    :mod:`shardwise.loader.batches.piece_maker`)."""
    maker = PieceMaker.of(reading, travel, pin=False)
    builder = WindowBuilder(reading, wp)
    try:
        windows = plan_windows(reading, wp)
        size, apart = piece_size(reading, windows.units), reading.batch_format is None
        for parts in piece_parts(builder, windows, size, apart):
            piece = maker.made(parts)
            if reading.batch_format is not None:
                yield from maker.batches(piece)
                continue
            table = piece.arrow
            assert table is not None
            for a in range(0, table.num_rows, SAMPLE_CHUNK):
                for row in rows(table.slice(a, SAMPLE_CHUNK)):
                    yield (row if travel is None else travel(row, {})), 1
    finally:
        builder.close()
