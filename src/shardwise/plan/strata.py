"""Stratified mixing (pure numpy): every batch holds each source's share.

The per-rank batch of ``batch_size`` samples is split among the sources by the
largest-remainder rule on their quotas (``k[s]`` samples of source ``s``, summing to
``batch_size``); each source with ``k[s] > 0`` gets a plan of its own (an
:class:`~shardwise.plan.EpochPlan` of batch ``k[s]`` on the same ranks and workers, over
``k[s] * batches * ranks * workers`` samples of that source), and batch ``j`` of a rank
is batch ``j`` of every source's plan, sources in order. A source whose share rounds to
0 contributes nothing. After an elastic resume every source's plan is cut again, and
the epoch continues while every source still has its share (the few samples left of
the others are left out and counted in ``num_left_out``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.compose import (
    ComposedWorker,
    compose,
    part_of,
    round_robin_batches,
    round_robin_count,
)
from shardwise.plan.epoch import EpochPlan
from shardwise.plan.mix import (
    Mixing,
    counts_key,
    kept_stream,
    largest_remainder,
    order_segments,
    source_segments,
)
from shardwise.plan.segments import Stream
from shardwise.plan.topology import Resume, Topology

__all__ = ["StratifiedPlan"]


class StratifiedPlan:
    """The plan of one epoch of stratified batches (same interface as ``EpochPlan``).

    Args:
        counts: samples per unit of all sources.
        topology: ranks, workers, batch size (of the whole batch), drop_last, interleave.
        mixing: the sources (``mixing.batching`` is not consulted).
        seed, epoch, shuffle, resumes: as for ``EpochPlan``.
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
    ) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        self.topology, self.mixing = topology, mixing
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), shuffle
        self.resumes = list(resumes)
        self._quotas = mixing.quotas(self.counts)
        first = self.resumes[0].topology if self.resumes else topology
        # the batch the epoch started with; other batch sizes keep its make-up
        self._first = largest_remainder(first.batch_size, self._quotas.astype(np.float64))
        self.sources = [s for s, k in enumerate(self._first.tolist()) if k > 0]
        elastic = bool(self.resumes) and self.resumes[-1].topology != topology
        self.parts = [
            EpochPlan(
                self.counts,
                self._sub(topology, s),
                seed=seed,
                epoch=epoch,
                shuffle=shuffle,
                resumes=[
                    Resume(self._sub(r.topology, s), r.consumed_batches) for r in self.resumes
                ],
                base=partial(self._base, s),
                elastic=elastic,
            )
            for s in self.sources
        ]

    def shares(self, batch_size: int) -> np.ndarray:
        """Samples of each source in a batch of ``batch_size`` (in proportion to the
        make-up of the epoch's first batch size)."""
        return largest_remainder(batch_size, self._first.astype(np.float64))

    def _sub(self, t: Topology, source: int) -> Topology:
        k = int(self.shares(t.batch_size)[source])
        if k == 0:
            raise PlanError(
                f"batch_size {t.batch_size} leaves no room in a stratified batch for source "
                f"{source}, which the epoch started with; use a larger batch_size"
            )
        return Topology(t.world_size, t.num_workers, k, t.drop_last, t.interleave)

    def _batches(self, t: Topology) -> int:
        total, quantum = int(self._quotas.sum()), t.slots * t.batch_size
        per_worker = total // quantum if t.drop_last else -(-total // quantum)
        if per_worker == 0:
            raise PlanError(
                f"the sources' quotas ({total} samples) are fewer than "
                f"world_size*num_workers*batch_size = {quantum}"
            )
        return per_worker

    def _base(self, source: int, t: Topology) -> Stream:
        """Source ``source``'s samples for an epoch that started on ``t`` (a source's topology)."""
        whole = self.resumes[0].topology if self.resumes else self.topology
        quota = int(self.shares(whole.batch_size)[source]) * self._batches(whole) * whole.slots
        key = (
            self.mixing,
            counts_key(self.counts),
            source,
            quota,
            t,
            self.seed,
            self.epoch,
            self.shuffle,
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

    # -- the EpochPlan interface -----------------------------------------------------------
    @property
    def consumed_batches(self) -> int:
        return self.parts[0].consumed_batches

    @property
    def batches_per_worker(self) -> int:
        return min(p.batches_per_worker for p in self.parts)

    @property
    def batches_per_rank(self) -> int:
        return self.batches_per_worker * self.topology.num_workers - self.consumed_batches

    @property
    def samples_per_rank(self) -> int:
        return self.batches_per_rank * self.topology.batch_size

    @property
    def samples_per_worker(self) -> int:
        return self.batches_per_worker * self.topology.batch_size

    @property
    def num_left_out(self) -> int:
        slots, bpw = self.topology.slots, self.batches_per_worker
        return sum(
            p.num_left_out + (p.batches_per_worker - bpw) * p.topology.batch_size * slots
            for p in self.parts
        )

    @property
    def num_padded(self) -> int:
        return sum(p.num_padded for p in self.parts)

    def per_source(self) -> list[int]:
        """Samples of each source this epoch (from this plan's start)."""
        out = [0] * (len(self.mixing.bounds) - 1)
        for s, p in zip(self.sources, self.parts):
            out[s] = p.topology.batch_size * self.batches_per_rank * self.topology.world_size
        return out

    def worker(self, rank: int, worker_id: int = 0) -> ComposedWorker:
        """The plan of one (rank, dataloader worker): batches in the rank's round-robin."""
        subs = [p.worker(rank, worker_id) for p in self.parts]
        n = round_robin_count(self.batches_per_rank, worker_id, self.topology.num_workers)
        parts = [part_of(w, p.topology.batch_size) for w, p in zip(subs, self.parts)]
        return compose(subs[0].slot, parts, [np.arange(n)] * len(parts))

    def slot_worker(self, slot: int) -> ComposedWorker:
        """The whole piece of ``slot`` as first cut (for plans composed of plans)."""
        parts = [part_of(p.slot_worker(slot), p.topology.batch_size) for p in self.parts]
        return compose(slot, parts, [np.arange(self.batches_per_worker)] * len(parts))

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
        continuing = bool(self.resumes) and self.resumes[-1].topology == self.topology
        previous = self.resumes[:-1] if continuing else self.resumes
        point = Resume(self.topology, self.consumed_batches + consumed_batches)
        return StratifiedPlan(
            self.counts,
            topology or self.topology,
            self.mixing,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            resumes=[*previous, point],
        )
