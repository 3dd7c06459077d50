"""One stretch of a stratified epoch on one topology (pure numpy): each source's stream,
the samples of each source in every batch (:mod:`.quota`), and the workers made of them.

Source ``s``'s stream is cut into one consecutive piece per slot (``rank * num_workers +
worker``, rank-major), of the samples of ``s`` in the batches that slot yields; a slot
reads its piece of each source in windows (:class:`~shardwise.plan.worker_share.WorkerPlan`)
and its batch ``t`` is, source after source, the next ``counts[t, s]`` samples of each.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

import numpy as np

from shardwise.plan.compose import ComposedWorker
from shardwise.plan.grid_split import grid_planned
from shardwise.plan.quota import planned
from shardwise.plan.segments import PartedStream, Segment, Stream
from shardwise.plan.topology import Resume, Topology
from shardwise.plan.worker_share import WorkerPlan

__all__ = ["SourceOrders", "Stretch", "compose_counts"]

SourceStream = Stream | PartedStream


class RowPerms(Protocol):
    """What holds the epoch's row orders (the plan)."""

    def row_perm(self, unit: int) -> np.ndarray:
        """The epoch's row order of ``unit``."""
        ...


@dataclass
class SourceOrders:
    """The seeds one source's windows are ordered with (a :class:`~.worker_share.Orders`)."""

    seed: int
    epoch: int
    generation: int
    shuffle: bool
    perms: RowPerms  # the plan (one cache of row orders for all sources)

    def row_perm(self, unit: int) -> np.ndarray:
        """The epoch's row order of ``unit``."""
        return self.perms.row_perm(unit)


class Stretch:
    """The epoch (or what is left of it after an elastic resume) on ``topology``.

    Args:
        topology: ranks, workers, per-rank batch size, interleave.
        streams: each source's samples for this stretch, in order.
        totals: samples of each source it takes (``sum == batches * world_size * batch``;
            a source's stream wraps around if it holds fewer).
        batches: batches per rank.
        orders: each source's seeds.
        grid: ``topology`` is a canonical grid, whose ranks the real ranks group: its
            batches are split so that every divisor's groups hold the shares to within one
            (:mod:`.grid_split`).
    """

    def __init__(
        self,
        topology: Topology,
        streams: Sequence[SourceStream],
        totals: np.ndarray,
        batches: int,
        orders: Sequence[SourceOrders],
        grid: bool = False,
    ) -> None:
        self.topology, self.streams, self.orders = topology, list(streams), list(orders)
        self.totals = np.asarray(totals, dtype=np.int64)
        self.batches = int(batches)
        plan_of = grid_planned if grid else planned
        self.schedule = plan_of(self.totals, self.batches, topology.world_size)
        t = topology
        pieces = []
        for r in range(t.world_size):
            mine = self.schedule.rank(r)
            pieces += [mine[w :: t.num_workers].sum(axis=0) for w in range(t.num_workers)]
        self.pieces = np.stack(pieces).reshape(t.slots, len(self.totals))
        self.offsets = np.cumsum(self.pieces, axis=0) - self.pieces  # (slots, S)

    def slot_counts(self, slot: int) -> np.ndarray:
        """``(batches_per_worker, S)``: samples of each source in each batch of ``slot``."""
        w = self.topology.num_workers
        return self.schedule.rank(slot // w)[slot % w :: w]

    def source_worker(self, slot: int, source: int) -> WorkerPlan:
        """The piece of ``source`` that ``slot`` reads, in windows."""
        t, n = self.topology, int(self.pieces[slot, source])
        start = int(self.offsets[slot, source])
        segs = self.streams[source].slice(start, start + n) if n else []
        per_batch = max(1, round(n / max(1, self.batches // t.num_workers)))
        sub = Topology(t.world_size, t.num_workers, per_batch, t.drop_last, t.interleave)
        return WorkerPlan(self.orders[source], sub, slot, segs, 0, n)

    def composed(self, slot: int) -> ComposedWorker:
        """The whole sequence of ``slot``: its batches made of its pieces of every source."""
        parts = [self.source_worker(slot, s) for s in range(len(self.streams))]
        return compose_counts(slot, [_flat(p) for p in parts], self.slot_counts(slot))

    def remaining(self, at: Resume) -> list[tuple[np.ndarray, np.ndarray]]:
        """Per source: what each slot had not delivered at the interruption ``at``, as
        (samples left per slot, samples delivered per slot)."""
        t = self.topology
        done = np.zeros_like(self.pieces)
        for slot in range(t.slots):
            d = at.delivered(slot)
            done[slot] = self.slot_counts(slot)[:d].sum(axis=0)
        return [(self.pieces[:, s] - done[:, s], done[:, s]) for s in range(len(self.streams))]

    def left_stream(self, source: int, left: np.ndarray, done: np.ndarray) -> PartedStream:
        """What ``source``'s pieces had not delivered, one part per slot, built when reached."""
        return PartedStream(left, partial(self._left_part, source, done))

    def _left_part(self, source: int, done: np.ndarray, slot: int) -> list[Segment]:
        return self.source_worker(slot, source).remaining_segments(int(done[slot]))


Flat = tuple[np.ndarray, np.ndarray, np.ndarray]  # unit ids, rows, row offsets of windows


def _flat(worker: WorkerPlan) -> Flat:
    units, rows, starts = [], [], [0]
    for _, u, r in worker.iter_windows():
        units.append(u)
        rows.append(r)
        starts.append(starts[-1] + len(r))
    empty = np.empty(0, dtype=np.int64)
    return (
        np.concatenate(units) if units else empty,
        np.concatenate(rows) if rows else empty,
        np.asarray(starts[:-1], dtype=np.int64),
    )


def compose_counts(slot: int, parts: Sequence[Flat], counts: np.ndarray) -> ComposedWorker:
    """A worker whose batch ``t`` is, part after part, the next ``counts[t, i]`` samples of
    ``parts[i]``; a batch in which one of the parts' windows begins begins a window."""
    counts = np.asarray(counts, dtype=np.int64)
    n, k = counts.shape
    ends = np.cumsum(counts, axis=0)
    lens = counts.ravel()
    which = np.repeat(np.tile(np.arange(k), n), lens)
    begin = np.repeat((ends - counts).ravel(), lens)
    first = np.repeat(np.cumsum(lens) - lens, lens)
    pos = begin + np.arange(int(lens.sum()), dtype=np.int64) - first
    base = np.cumsum([0] + [len(p[0]) for p in parts])[:-1]
    all_u = np.concatenate([p[0] for p in parts]) if parts else np.empty(0, np.int64)
    all_r = np.concatenate([p[1] for p in parts]) if parts else np.empty(0, np.int64)
    idx = base[which] + pos if len(pos) else pos
    batch_rows = np.concatenate([[0], np.cumsum(counts.sum(axis=1))])
    starts = [np.zeros(1, dtype=np.int64)]
    for i, p in enumerate(parts):
        inside = p[2][p[2] < (ends[-1, i] if n else 0)]
        starts.append(batch_rows[np.searchsorted(ends[:, i], inside, side="right")])
    return ComposedWorker(
        slot, all_u[idx], all_r[idx], np.unique(np.concatenate(starts)).astype(np.int64)
    )
