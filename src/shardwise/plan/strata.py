"""Stratified mixing (pure numpy): every batch holds each source's share, and the epoch
its exact quota.

The sources' quotas are scaled to whole global batches (:meth:`Mixing.aligned_quotas`)
and spread over the epoch's batches by :mod:`.quota`: every global batch, and every
rank's batch, holds ``floor`` or ``ceil`` of each source's share, the rounding varying
from batch to batch and from rank to rank so that the epoch takes exactly the quotas
(a source whose share is below one sample comes in its turn). Each source's samples are
cut into one piece per (rank, worker) of what that worker's batches take of it
(:mod:`.strata_parts`).

Resuming on the same topology continues exactly (workers skip what they delivered).
After an elastic resume, what every worker had not delivered of each source is planned
again on the new topology: the same rule over what is left, the few samples that do not
fill a last global batch (``drop_last``) left out in proportion and counted in
``num_left_out``, or padded from the start of what is left.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.compose import ComposedWorker, round_robin_batches, round_robin_count
from shardwise.plan.cut import delivered
from shardwise.plan.grid_split import nested
from shardwise.plan.mix import (
    Mixing,
    counts_key,
    kept_stream,
    largest_remainder,
    order_segments,
    source_segments,
)
from shardwise.plan.order import ROWS, rng_for
from shardwise.plan.quota import deviation
from shardwise.plan.segments import Stream
from shardwise.plan.strata_parts import SourceOrders, SourceStream, Stretch
from shardwise.plan.topology import Resume, Topology

__all__ = ["GRID_STRATA_VERSION", "STRATA_VERSION", "StratifiedPlan", "strata_layout"]

# the layout of stratified plans: saved states record it, and a state of another layout
# cannot resume (1: the same make-up in every batch; 2: the rounding carried over batches;
# 3: as 2, and on a canonical grid that is not a prime power every divisor's ranks within
# one, :mod:`.grid_split`; the plans of layout 2 on other grids did not change)
STRATA_VERSION = 2
GRID_STRATA_VERSION = 3


def strata_layout(canonical_workers: int | None) -> int:
    """The layout of a stratified plan (on ``canonical_workers`` if given)."""
    c = canonical_workers
    return STRATA_VERSION if c is None or nested(int(c)) else GRID_STRATA_VERSION


SOURCES = 4096  # a stretch's seeds: generation * SOURCES + source + 1


class StratifiedPlan:
    """The plan of one epoch of stratified batches (same interface as ``EpochPlan``).

    Args:
        counts: samples per unit of all sources.
        topology: ranks, workers, batch size (of the whole batch), drop_last, interleave.
        mixing: the sources (``mixing.batching`` is not consulted).
        seed, epoch, shuffle, resumes: as for ``EpochPlan``.
        grid: ``topology`` is a canonical grid (see :class:`~.strata_parts.Stretch`).
    """

    def __init__(
        self,
        counts: Sequence[int] | np.ndarray,
        topology: Topology,
        mixing: Mixing,
        *,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        resumes: Sequence[Resume] = (),
        grid: bool = False,
    ) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        self.grid = grid
        self.topology, self.mixing = topology, mixing
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), shuffle
        if self.seed < 0 or self.epoch < 0:
            raise PlanError(f"seed and epoch must be >= 0, got seed={seed}, epoch={epoch}")
        self.resumes = list(resumes)
        self._row_perms: dict[int, np.ndarray] = {}
        self._continued, self._continuation = 0, False
        self.num_left_out = self.num_padded = 0
        tops = [r.topology for r in self.resumes] + [topology]
        self.stretch = self._first(tops[0])
        # the quotas' rounding to the first topology's rounds (an elastic resume, below,
        # reports its own instead)
        self.num_left_out, self.num_padded = mixing.rounding(self.counts, tops[0])
        for i, r in enumerate(self.resumes):
            self._check(r)
            if i == len(self.resumes) - 1 and r.topology == topology and r.done is None:
                self._continued, self._continuation = r.consumed_batches, True
            else:
                self.stretch = self._elastic(r, tops[i + 1], i + 1)

    def _check(self, r: Resume) -> None:
        per_worker = self.stretch.batches // r.topology.num_workers
        if r.consumed_batches > self.stretch.batches or max(r.done or [0]) > per_worker:
            raise PlanError(
                f"the state says more batches were consumed ({r.consumed_batches} per rank, "
                f"{max(r.done or [0])} of one worker) than this epoch has "
                f"({self.stretch.batches} per rank)"
            )

    # -- building -------------------------------------------------------------------
    def _orders(self, generation: int) -> list[SourceOrders]:
        return [
            SourceOrders(self.seed, self.epoch, generation * SOURCES + s + 1, self.shuffle, self)
            for s in range(len(self.mixing.rules))
        ]

    def _first(self, t: Topology) -> Stretch:
        quotas = self.mixing.aligned_quotas(self.counts, t)
        streams = [self._source_stream(s, int(q), t) for s, q in enumerate(quotas.tolist())]
        batches = int(quotas.sum()) // (t.world_size * t.batch_size)
        return Stretch(t, streams, quotas, batches, self._orders(0), self.grid)

    def _source_stream(self, source: int, quota: int, t: Topology) -> Stream:
        if quota == 0:
            return Stream([])
        key = (
            *(self.mixing, counts_key(self.counts), source, quota, t.slots, t.interleave),
            *(self.seed, self.epoch, self.shuffle, "stratified"),
        )
        return kept_stream(key, partial(self._build, source, quota, t))

    def _build(self, source: int, quota: int, t: Topology) -> Stream:
        b = self.mixing.bounds
        segs = source_segments(
            self.counts,
            b[source],
            b[source + 1],
            quota,
            seed=self.seed,
            epoch=self.epoch,
            source=source,
            shuffle=self.shuffle,
        )
        return order_segments(
            segs, t, seed=self.seed, epoch=self.epoch, shuffle=self.shuffle, salt=source + 1
        )

    def _elastic(self, r: Resume, t: Topology, generation: int) -> Stretch:
        """The stretch on ``t`` of what the current one had not delivered at ``r``."""
        old = self.stretch
        parts = old.remaining(r)
        streams: list[SourceStream] = [
            old.left_stream(s, left, done) for s, (left, done) in enumerate(parts)
        ]
        left = np.array([int(p[0].sum()) for p in parts], dtype=np.int64)
        have, quantum = int(left.sum()), t.slots * t.batch_size
        per_worker = have // quantum if t.drop_last else -(-have // quantum)
        batches, want = per_worker * t.num_workers, per_worker * quantum
        totals = largest_remainder(want, left) if want else np.zeros_like(left)
        self.num_left_out, self.num_padded = max(0, have - want), max(0, want - have)
        return Stretch(t, streams, totals, batches, self._orders(generation), self.grid)

    def row_perm(self, unit: int) -> np.ndarray:
        """The epoch's row order of ``unit`` (cached)."""
        perm = self._row_perms.get(unit)
        if perm is None:
            n = int(self.counts[unit])
            rng = rng_for(self.seed, self.epoch, unit, ROWS)
            perm = rng.permutation(n) if self.shuffle else np.arange(n)
            if len(self._row_perms) > 64:
                self._row_perms.clear()
            self._row_perms[unit] = perm
        return perm

    # -- the EpochPlan interface -----------------------------------------------------------
    @property
    def consumed_batches(self) -> int:
        return self._continued

    @property
    def batches_per_worker(self) -> int:
        return self.stretch.batches // self.topology.num_workers

    @property
    def batches_per_rank(self) -> int:
        return self.stretch.batches - self.consumed_batches

    @property
    def samples_per_rank(self) -> int:
        return self.batches_per_rank * self.topology.batch_size

    @property
    def samples_per_worker(self) -> int:
        return self.batches_per_worker * self.topology.batch_size

    def per_source(self) -> list[int]:
        """Samples of each source this epoch (from this plan's start)."""
        table = self.stretch.schedule.table[self.consumed_batches :]
        return [int(x) for x in table.sum(axis=0)]

    def batch_shares(self, ranks: int | None = None) -> dict[str, list[float]]:
        """How far the batches are from each source's share (see :func:`.quota.deviation`;
        ``ranks``: of groups of consecutive ranks, for a canonical grid's real ranks)."""
        return deviation(self.stretch.schedule, self.consumed_batches, ranks)

    def worker(self, rank: int, worker_id: int = 0) -> ComposedWorker:
        """The plan of one (rank, dataloader worker): batches in the rank's round-robin.

        After a same-topology resume at batch ``k``, worker ``w`` takes over what worker
        ``(w + k) % num_workers`` had left (the DataLoader starts again at worker 0)."""
        t = self.topology
        if not (0 <= rank < t.world_size and 0 <= worker_id < t.num_workers):
            raise PlanError(
                f"rank {rank}/worker {worker_id} is outside world_size={t.world_size}, "
                f"num_workers={t.num_workers}"
            )
        slot = rank * t.num_workers + (worker_id + self.consumed_batches) % t.num_workers
        cw = self.stretch.composed(slot)
        cw.skip = delivered(slot, self.consumed_batches, t.num_workers) * t.batch_size
        cw.num_samples = len(cw.rows) - cw.skip
        n = round_robin_count(self.batches_per_rank, worker_id, t.num_workers)
        if n * t.batch_size != cw.num_samples:
            raise PlanError(f"worker {worker_id} of rank {rank} holds a partial batch")
        return cw

    def slot_worker(self, slot: int) -> ComposedWorker:
        """The whole piece of ``slot`` as first cut (for plans composed of plans)."""
        return self.stretch.composed(slot)

    def rank_batches(self, rank: int) -> list[np.ndarray]:
        """The rank's batches as ``(batch_size, 2)`` arrays of ``(unit, row)``."""
        t = self.topology
        per_worker = [self.worker(rank, w).pairs() for w in range(t.num_workers)]
        return round_robin_batches(per_worker, t.batch_size, self.batches_per_rank)

    def resume(self, consumed_batches: int, topology: Topology | None = None) -> StratifiedPlan:
        """The plan that continues this epoch after ``consumed_batches`` batches per rank."""
        if not 0 <= consumed_batches <= self.batches_per_rank:
            raise PlanError(
                f"consumed_batches must be in [0, {self.batches_per_rank}], got {consumed_batches}"
            )
        previous = self.resumes[:-1] if self._continuation else self.resumes
        point = Resume(self.topology, self.consumed_batches + consumed_batches)
        return StratifiedPlan(
            self.counts,
            topology or self.topology,
            self.mixing,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            resumes=[*previous, point],
            grid=self.grid,
        )
