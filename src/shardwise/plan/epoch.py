"""The loader plan of one epoch: exact, equal, deterministic, resumable.

Given per-unit sample counts and the training topology, :class:`EpochPlan` decides
for every (rank, dataloader worker) the exact ordered list of ``(unit, row)`` it yields:

1. Units are permuted per epoch (seeded by ``seed`` and ``epoch``) and concatenated
   into one stream; rows inside each unit follow a per-epoch permutation. The unit
   permutation is stratified (:func:`spread_order`): each worker's piece and each of
   its windows take units from all over the dataset, which matters when the data is
   stored sorted or clustered.
2. The stream is cut into ``world_size * num_workers`` consecutive equal pieces
   (rank-major), each a multiple of ``batch_size``. ``drop_last=True`` leaves out the
   tail (fewer than ``world_size * num_workers * batch_size`` samples, a different
   tail each epoch); ``drop_last=False`` pads with samples from the start of the
   epoch's order, and only those. Consecutive pieces mean a unit is read by at most
   two workers per epoch.
3. A worker reads its piece in windows of up to ``interleave`` consecutive segments
   (as many windows as needed, of equal size) and
   emits each window's rows in a seeded shuffled order, mixing a bounded number of
   units at a time. The order is stratified (:func:`stratified_order`): each batch
   takes every unit of the window in proportion, as a systematic sample.
4. Batch ``j`` of a rank comes from worker ``j % num_workers`` (counted from where the
   DataLoader starts, also after a resume): the round-robin
   order in which a PyTorch DataLoader collects worker output, so the consumed
   sequence does not depend on worker timing.

Resumption: :meth:`EpochPlan.resume` after ``k`` batches per rank. With the same
topology the epoch continues exactly (each worker skips what it already delivered);
with another world size, worker count or batch size, the samples not yet consumed
form a new stream that is cut again, so nothing consumed is repeated. Both are
O(units) plus, for each worker asked for, the windows it reads, never O(samples
consumed): the new stream is one part per interrupted worker, built only when a piece
reaches it (:class:`~shardwise.plan.segments.PartedStream`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.blocks import Blocks, block_bounds, block_perm
from shardwise.plan.cut import Cut, cut, delivered
from shardwise.plan.order import ROWS, UNITS, rng_for, spread_order, stratified_order
from shardwise.plan.padcopies import repeated_units, without_copies
from shardwise.plan.segments import PartedStream, Segment, Stream, unit_stream
from shardwise.plan.topology import Resume, Topology
from shardwise.plan.worker_share import WorkerPlan

__all__ = ["EpochPlan", "Resume", "Topology", "WorkerPlan", "spread_order", "stratified_order"]


class EpochPlan:
    """The plan of one epoch (see the module docstring for the contract).

    Args:
        counts: samples per unit (``DatasetIndex.counts()``, or filtered match counts).
        topology: ranks, workers, batch size, drop_last, interleave.
        seed: base seed; the same inputs give the same plan.
        epoch: epoch number; each epoch has a different order.
        shuffle: permute units, rows and windows (False: file order throughout).
        resumes: earlier interruptions of this epoch, oldest first.
        base: the epoch's stream for the topology it started on (default: every unit
            once, in the stratified order); mixing builds its own (see :mod:`.deal`
            and :mod:`.strata`).
        elastic: continue the last resume by re-cutting, also on the same topology.
        blocks: ``k`` > 1: every unit's first ``1/k`` of rows (its head) read first, in a
            window of every head of a window group, then the rest (:mod:`.blocks`).
        even_blocks: with ``blocks``, ``k`` equal blocks and windows instead.
    """

    def __init__(
        self,
        counts: Sequence[int] | np.ndarray,
        topology: Topology,
        *,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        resumes: Sequence[Resume] = (),
        base: Callable[[Topology], Stream] | None = None,
        elastic: bool = False,
        blocks: int = 1,
        even_blocks: bool = False,
    ) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        if self.counts.ndim != 1 or (self.counts < 0).any():
            raise PlanError("counts must be a 1-D array of non-negative sample counts")
        self.blocks = _blocks(self.counts, blocks, even_blocks)
        self.topology = topology
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), shuffle
        if self.seed < 0 or self.epoch < 0:
            raise PlanError(
                f"seed and epoch must be >= 0, got seed={self.seed}, epoch={self.epoch}"
            )
        self.resumes = list(resumes)
        self.base = base
        self.generation = 0
        self._row_perms: dict[int, np.ndarray] = {}
        self._continued = 0
        self._continuation = False
        self._own = self._base_stream()  # the epoch's own samples (see _repeated_units)
        self._repeats: np.ndarray | None = None
        self.stream: Stream | PartedStream = self._own
        for i, r in enumerate(self.resumes):
            last = i == len(self.resumes) - 1
            if last and r.topology == self.topology and not elastic and r.done is None:
                self._cut()
                self._check(r, self.pieces)
                self._continued = r.consumed_batches  # continue exactly: workers skip
                self._continuation = True
            else:
                self._elastic(r)
        self._cut()

    # -- building -------------------------------------------------------------------
    def _base_stream(self) -> Stream:
        n = len(self.counts)
        # the order the epoch started with, also when it resumes on another topology
        t = self.resumes[0].topology if self.resumes else self.topology
        if self.base is not None:
            return self.base(t)
        order = (
            spread_order(self.counts, t.slots, t.interleave, rng_for(self.seed, self.epoch, UNITS))
            if self.shuffle
            else np.arange(n)
        )
        return unit_stream(self.counts, order)

    def _check(self, r: Resume, pieces: Cut) -> None:
        per_worker = pieces.samples_per_worker // r.topology.batch_size
        if r.done is not None and max(r.done, default=0) > per_worker:
            raise PlanError(
                f"the state says a worker delivered {max(r.done)} batches, but this epoch "
                f"gives each only {per_worker}"
            )
        have = per_worker * r.topology.num_workers
        if r.consumed_batches > have:
            raise PlanError(
                f"the state says {r.consumed_batches} batches per rank were consumed, but this "
                f"epoch has only {have}"
            )

    def _elastic(self, r: Resume) -> None:
        """Replace the stream by what ``r.topology`` had not delivered after the interruption:
        one part per worker it had, each built only when a worker's piece reaches it."""
        t, stream = r.topology, self.stream
        pieces = cut(stream.size, t, fresh=self.generation == 0)
        self._check(r, pieces)
        per = pieces.samples_per_worker
        done = np.array([r.delivered(s) for s in range(t.slots)], dtype=np.int64) * t.batch_size
        orders = _Orders(self)  # this generation's seeds: the parts are built later

        def left(slot: int) -> list[Segment]:
            segs = stream.slice(slot * per, (slot + 1) * per)
            wp = WorkerPlan(orders, t, slot, segs, 0, per, self.blocks)
            return wp.remaining_segments(int(done[slot]))

        self.generation += 1
        sizes, build = without_copies(
            stream, per, pieces.num_padded, per - done, left, self._repeated_units
        )
        self.stream = PartedStream(sizes, build)

    def _repeated_units(self) -> np.ndarray:
        """The units the epoch's own stream holds some sample of more than once (worked
        out once, when first asked for; without mixing, none): see :mod:`.padcopies`."""
        if self._repeats is None:
            own = self._own if self.base is not None else None
            self._repeats = repeated_units(own, self.counts)
        return self._repeats

    def _cut(self) -> None:
        # an elastic resume may legitimately have little left
        self.pieces = cut(self.stream.size, self.topology, fresh=self.generation == 0)
        self.samples_per_worker = self.pieces.samples_per_worker
        self.num_left_out = self.pieces.num_left_out
        self.num_padded = self.pieces.num_padded

    def _worker(self, topology: Topology, pieces: Cut, slot: int) -> WorkerPlan:
        start = slot * pieces.samples_per_worker
        segs = self.stream.slice(start, start + pieces.samples_per_worker)
        return WorkerPlan(self, topology, slot, segs, 0, pieces.samples_per_worker, self.blocks)

    # -- public ---------------------------------------------------------------------
    @property
    def batches_per_worker(self) -> int:
        return self.samples_per_worker // self.topology.batch_size

    @property
    def batches_per_rank(self) -> int:
        """Batches every rank yields in this epoch (from the resume point, if any)."""
        return self.batches_per_worker * self.topology.num_workers - self.consumed_batches

    @property
    def consumed_batches(self) -> int:
        """Batches per rank consumed on this stream before this plan starts (same topology)."""
        return self._continued

    @property
    def samples_per_rank(self) -> int:
        return self.batches_per_rank * self.topology.batch_size

    def row_perm(self, unit: int) -> np.ndarray:
        """The epoch's row order of ``unit`` (cached)."""
        perm = self._row_perms.get(unit)
        if perm is None:
            n = int(self.counts[unit])
            bounds = self.blocks.bounds(unit) if self.blocks else block_bounds(n, 1)
            perm = (
                block_perm(bounds, rng_for(self.seed, self.epoch, unit, ROWS))
                if self.shuffle
                else np.arange(n)
            )
            if len(self._row_perms) > 64:
                self._row_perms.clear()
            self._row_perms[unit] = perm
        return perm

    def worker(self, rank: int, worker_id: int = 0) -> WorkerPlan:
        """The plan of one (rank, dataloader worker).

        After a same-topology resume at batch ``k``, the DataLoader starts its round-robin
        at worker 0 again, so worker ``w`` takes over what worker ``(w + k) % num_workers``
        had left: the consumed sequence stays exactly the uninterrupted one.
        """
        t = self.topology
        if not (0 <= rank < t.world_size and 0 <= worker_id < t.num_workers):
            raise PlanError(
                f"rank {rank}/worker {worker_id} is outside world_size={t.world_size}, "
                f"num_workers={t.num_workers}"
            )
        original = (worker_id + self.consumed_batches) % t.num_workers
        slot = rank * t.num_workers + original
        wp = self._worker(t, self.pieces, slot)
        done = delivered(slot, self.consumed_batches, t.num_workers) * t.batch_size
        wp.skip, wp.num_samples = done, self.samples_per_worker - done
        return wp

    def slot_worker(self, slot: int) -> WorkerPlan:
        """The whole piece of ``slot`` (``rank * num_workers + worker``) as first cut,
        with nothing skipped (for plans composed of plans)."""
        return self._worker(self.topology, self.pieces, slot)

    def rank_batches(self, rank: int) -> list[np.ndarray]:
        """The rank's batches as ``(batch_size, 2)`` arrays of ``(unit, row)``, in the
        DataLoader's round-robin order (small data, tests and tools)."""
        t = self.topology
        per_worker = [self.worker(rank, w).pairs() for w in range(t.num_workers)]
        b = t.batch_size
        return [
            per_worker[j % t.num_workers][(j // t.num_workers) * b : (j // t.num_workers + 1) * b]
            for j in range(self.batches_per_rank)
        ]

    def resume(self, consumed_batches: int, topology: Topology | None = None) -> EpochPlan:
        """The plan that continues this epoch after ``consumed_batches`` batches per rank
        (counted from this plan's start), on ``topology`` (default: the same)."""
        if not 0 <= consumed_batches <= self.batches_per_rank:
            raise PlanError(
                f"consumed_batches must be in [0, {self.batches_per_rank}], got {consumed_batches}"
            )
        total = self.consumed_batches + consumed_batches
        previous = self.resumes[:-1] if self._continuation else list(self.resumes)
        point = Resume(self.topology, total)
        return EpochPlan(
            self.counts,
            topology or self.topology,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            resumes=[*previous, point],
            base=self.base,
            blocks=self.blocks.k if self.blocks else 1,
            even_blocks=bool(self.blocks and self.blocks.even),
        )


def _blocks(counts: np.ndarray, blocks: int, even: bool) -> Blocks | None:
    """The plan's :class:`Blocks` (None for ``blocks=1``), or a :class:`PlanError`."""
    if isinstance(blocks, bool) or not isinstance(blocks, (int, np.integer)) or blocks < 1:
        raise PlanError(f"blocks must be a whole number >= 1, got {blocks!r}")
    return Blocks(counts, int(blocks), bool(even)) if blocks > 1 else None


class _Orders:
    """A plan's seeds and row orders as they are in its current generation."""

    def __init__(self, plan: EpochPlan) -> None:
        self.seed, self.epoch, self.generation, self.shuffle = (
            plan.seed,
            plan.epoch,
            plan.generation,
            plan.shuffle,
        )
        self._plan = plan

    def row_perm(self, unit: int) -> np.ndarray:
        return self._plan.row_perm(unit)
