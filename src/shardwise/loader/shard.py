"""What one (rank, worker) consumes in an epoch: its piece of the plan, the path that
makes its items, and the position kept as they are handed over.

Batches in the training process are made on its own threads
(:mod:`shardwise.loader.inprocess`); everything else (per-sample items, and whatever a
DataLoader worker makes) on one thread (:mod:`shardwise.loader.batches.serial`), a worker's
batches and samples travelling through its ring (:mod:`shardwise.loader.workers`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from shardwise.loader.batches.heads import HeadWindows, PartReading, reading_for
from shardwise.loader.batches.reading import Reading
from shardwise.loader.batches.serial import serial_items
from shardwise.loader.channel import Seen
from shardwise.loader.inprocess.threaded import threaded_batches
from shardwise.loader.placement import in_dataloader_worker
from shardwise.loader.planner import Planner
from shardwise.loader.position import Position
from shardwise.loader.state import LoaderState
from shardwise.loader.workers.carriers import travel_for
from shardwise.plan.compose import WorkerWindows

__all__ = ["shard_items"]


def shard_items(
    state: LoaderState,
    planner: Planner,
    reading: Reading,
    rank: int,
    world_size: int,
    worker_id: int,
    num_workers: int,
    skip: int = 0,
    begun: bool = False,
    hosted: bool = False,
) -> Iterator[Any]:
    """The samples or batches of data-parallel ``rank`` and ``worker_id`` this epoch
    (after its own saved progress, if the state holds it, and ``skip`` more samples, which
    are not read); ``state.position`` counts them as they are handed over. ``begun``: the
    caller began the pass (``state.begin_pass``) already; ``hosted``: it serves an
    accelerate wrapper."""
    if not begun:
        state.begin_pass(rank, worker_id)  # the epoch set, or the one after the last pass
    if in_dataloader_worker():
        state.channel.announce(world_size, num_workers, state.epoch, hosted)
    else:
        state.seen = Seen(world_size, num_workers, time.time(), state.epoch, hosted)
    wp = state.plan(planner, num_workers, world_size).worker(rank, worker_id)
    reading = reading_for(reading, state.counts, state.epoch_blocks())
    here = state.start_at(wp, Position(state.epoch, rank, world_size, worker_id, num_workers))
    if skip:
        skip = min(skip, wp.num_samples)
        wp.skip, wp.num_samples = wp.skip + skip, wp.num_samples - skip
        here = Position(*here.where(), here.samples + skip)
    yielded = here.samples
    where = here.where()
    for item, n in _items(reading, wp):
        yielded += n  # counted as handed over: a state taken now includes this item
        state.position = Position(*where, yielded)
        yield item


def _items(reading: Reading, wp: WorkerWindows) -> Iterator[tuple[Any, int]]:
    """Samples or batches, each with its number of samples (windows of parts with heads)."""
    if isinstance(reading, PartReading):
        wp = HeadWindows(wp, reading)
    if reading.batch_format is not None and not in_dataloader_worker():
        return threaded_batches(reading, wp)
    return serial_items(reading, wp, travel_for(reading.batch_format))
