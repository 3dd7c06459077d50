"""Canonical workers (pure numpy): the same global batches on every topology.

With ``canonical_workers=C`` and a global batch of ``G = world_size * batch_size``
samples, the epoch is planned once for a fixed grid of ``C x C`` cells: an inner plan
of ``C`` ranks x ``C`` workers with batches of ``g = G / C`` samples. Global batch ``i``
is, for every inner rank ``k`` in order, batch ``i`` of that rank (which its worker
``i % C`` yields, round-robin). Nothing in this depends on the real topology.

A real topology of ``N`` ranks x ``W`` workers with ``N * W`` dividing ``C`` serves it
thus: rank ``r`` holds inner ranks ``r * C/N`` to ``(r + 1) * C/N - 1`` (its batch of
``G/N`` samples is their batches, in order), and its DataLoader worker ``w`` yields the
rank's steps ``w, w + W, ...`` (round-robin), that is the cells of inner workers
``c = i % C`` for those steps. So a worker reads only the units of the ``C*C/(N*W)``
cells it serves. Resuming after global step ``s`` on any such topology continues at
step ``s``: the global sequence never changes. The grid keeps the ``drop_last`` and
``interleave`` of the topology the epoch started on (a resume with other values would
otherwise order the grid differently and repeat or skip samples), so a resumed state
records that first topology as well as the last one. The memory of a worker grows with the
cells it serves; keep ``C`` as small as the topologies you need allow.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.compose import (
    ComposedWorker,
    WorkerWindows,
    compose,
    part_of,
    round_robin_batches,
    round_robin_count,
)
from shardwise.plan.topology import Resume, Topology

__all__ = ["CanonicalPlan", "Inner"]


class Inner(Protocol):
    """What the canonical grid needs of a fresh plan: its cut and each cell's piece."""

    @property
    def batches_per_rank(self) -> int: ...
    @property
    def num_left_out(self) -> int: ...
    @property
    def num_padded(self) -> int: ...

    def slot_worker(self, slot: int) -> WorkerWindows:
        """The whole piece of one cell."""
        ...


class CanonicalPlan:
    """The plan of one epoch on ``topology``, served from a canonical grid.

    Args:
        topology: the real ranks, workers and per-rank batch size.
        canonical_workers: ``C``; ``world_size * num_workers`` must divide it, and it must
            divide the global batch ``world_size * batch_size``.
        inner: builds the fresh plan of the grid from its topology (``C`` ranks x ``C``
            workers, batch ``G / C``).
        resumes: the interruptions of this epoch; the last one's ``consumed_batches`` is
            the global step reached, whatever topology it was saved on.
    """

    def __init__(
        self,
        topology: Topology,
        canonical_workers: int,
        inner: Callable[[Topology], Inner],
        *,
        resumes: Sequence[Resume] = (),
    ) -> None:
        c, t = int(canonical_workers), topology
        self.topology, self.canonical_workers, self.resumes = t, c, list(resumes)
        self.global_batch = t.world_size * t.batch_size
        if c < 1 or c % t.slots:
            raise PlanError(
                f"canonical_workers={c} must be a multiple of world_size*num_workers = {t.slots}"
            )
        for r in self.resumes:
            if r.done is not None:
                raise PlanError(
                    "canonical_workers continues an epoch from its global step, and this state "
                    "records the ranks' pieces taken out of lockstep (HF Accelerate's "
                    "dispatcher); resume it on the topology that saved it"
                )
            if r.topology.world_size * r.topology.batch_size != self.global_batch:
                raise PlanError(
                    f"canonical_workers keeps the global batch: it was "
                    f"{r.topology.world_size * r.topology.batch_size}, now {self.global_batch} "
                    "(world_size * batch_size)"
                )
        if self.global_batch % c:
            raise PlanError(
                f"canonical_workers={c} must divide the global batch "
                f"world_size*batch_size = {self.global_batch}"
            )
        first = self.resumes[0].topology if self.resumes else t  # the grid the epoch started with
        self.grid = Topology(c, c, self.global_batch // c, first.drop_last, first.interleave)
        self._inner_factory = inner
        self.inner = inner(self.grid)
        self.consumed_batches = self.resumes[-1].consumed_batches if self.resumes else 0
        if not 0 <= self.consumed_batches <= self.inner.batches_per_rank:
            raise PlanError(
                f"the state says {self.consumed_batches} global steps were taken, but this "
                f"epoch has only {self.inner.batches_per_rank}"
            )

    @property
    def batches_per_rank(self) -> int:
        return self.inner.batches_per_rank - self.consumed_batches

    @property
    def samples_per_rank(self) -> int:
        return self.batches_per_rank * self.topology.batch_size

    @property
    def num_left_out(self) -> int:
        return self.inner.num_left_out

    @property
    def num_padded(self) -> int:
        return self.inner.num_padded

    def worker(self, rank: int, worker_id: int = 0) -> ComposedWorker:
        """The plan of one (rank, dataloader worker): its steps, from the cells it serves."""
        t, c, s = self.topology, self.canonical_workers, self.consumed_batches
        if not (0 <= rank < t.world_size and 0 <= worker_id < t.num_workers):
            raise PlanError(
                f"rank {rank}/worker {worker_id} is outside world_size={t.world_size}, "
                f"num_workers={t.num_workers}"
            )
        n = round_robin_count(self.batches_per_rank, worker_id, t.num_workers)
        steps = s + worker_id + t.num_workers * np.arange(n, dtype=np.int64)
        per_rank = c // t.world_size
        served = sorted({(s + worker_id + t.num_workers * j) % c for j in range(min(n, c))})
        parts, take = [], []
        for k in range(rank * per_rank, (rank + 1) * per_rank):
            for cell in served:
                parts.append(part_of(self.inner.slot_worker(k * c + cell), self.grid.batch_size))
                take.append(np.where(steps % c == cell, steps // c, -1))
        return compose(rank * t.num_workers + worker_id, parts, take)

    def rank_batches(self, rank: int) -> list[np.ndarray]:
        """The rank's batches as ``(batch_size, 2)`` arrays of ``(unit, row)``."""
        t = self.topology
        per_worker = [self.worker(rank, w).pairs() for w in range(t.num_workers)]
        return round_robin_batches(per_worker, t.batch_size, self.batches_per_rank)

    def resume(self, consumed_batches: int, topology: Topology | None = None) -> CanonicalPlan:
        """The plan that continues at the next global step, on ``topology`` (default: the same)."""
        if not 0 <= consumed_batches <= self.batches_per_rank:
            raise PlanError(
                f"consumed_batches must be in [0, {self.batches_per_rank}], got {consumed_batches}"
            )
        point = Resume(self.topology, self.consumed_batches + consumed_batches)
        origin = (
            self.resumes[:1] if self.resumes and self.resumes[0].topology != point.topology else []
        )
        return CanonicalPlan(
            topology or self.topology,
            self.canonical_workers,
            self._inner_factory,
            resumes=[*origin, point],
        )
