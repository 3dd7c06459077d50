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
O(units) plus one window per worker, never O(samples consumed).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.stream import Segment, Stream, unit_stream

__all__ = ["EpochPlan", "Resume", "Topology", "WorkerPlan", "spread_order", "stratified_order"]

_UNITS, _ROWS, _WINDOW = 0x556E, 0x526F, 0x5769


@dataclass(frozen=True)
class Topology:
    """Where samples go.

    Attributes:
        world_size: ranks.
        num_workers: dataloader workers per rank (1 if loading in the training process).
        batch_size: samples per batch of one rank.
        drop_last: leave out the tail (True) or pad from the start of the order (False).
        interleave: segments (units) mixed together by one worker.
    """

    world_size: int
    num_workers: int = 1
    batch_size: int = 1
    drop_last: bool = True
    interleave: int = 4

    def __post_init__(self) -> None:
        for name in ("world_size", "num_workers", "batch_size", "interleave"):
            if int(getattr(self, name)) < 1:
                raise PlanError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def slots(self) -> int:
        return self.world_size * self.num_workers


@dataclass(frozen=True)
class Resume:
    """A point where the epoch was interrupted: the topology then, and batches consumed per rank."""

    topology: Topology
    consumed_batches: int

    def to_dict(self) -> dict[str, Any]:
        return {"topology": asdict(self.topology), "consumed_batches": self.consumed_batches}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Resume:
        return cls(Topology(**d["topology"]), int(d["consumed_batches"]))


def _rng(*key: int) -> np.random.Generator:
    return np.random.default_rng([k & 0xFFFFFFFF for k in key] + [k >> 32 for k in key])


@dataclass
class WorkerPlan:
    """What one (rank, worker) yields: windows of ``(unit, row)`` pairs, in order.

    Attributes:
        segments: this worker's piece of the stream.
        skip: samples already delivered before a resume (skipped, not re-read).
        num_samples: samples this worker yields in the epoch (after ``skip``).
    """

    plan: EpochPlan
    slot: int
    segments: list[Segment]
    skip: int = 0
    num_samples: int = 0
    _perms: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def windows(self) -> list[list[Segment]]:
        """The segments cut into the fewest windows of at most ``interleave``, of equal
        size (give or take one): a last window of a few units would mix poorly."""
        k = self.plan.topology.interleave
        n = len(self.segments)
        count = -(-n // k)
        bounds = [i * n // count for i in range(count + 1)] if n else [0]
        return [self.segments[a:b] for a, b in pairwise(bounds)]

    def units(self) -> list[int]:
        """Units this worker reads, in first-use order (for prefetching)."""
        seen: dict[int, None] = {}
        for s in self.segments:
            seen.setdefault(s.unit, None)
        return list(seen)

    def _window_order(self, w: int, window: list[Segment], *, rows: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """Unit ids and positions of the window's samples in emitted order; with ``rows``,
        real row numbers (the epoch's row permutation applied) instead of positions."""
        units = np.repeat(np.array([s.unit for s in window], dtype=np.int64), [s.size for s in window])
        if rows:
            perms = [self.plan.row_perm(s.unit) for s in window]
            pos = np.concatenate([p[s.lo : s.hi] if s.rows is None else p[s.rows] for p, s in zip(perms, window)])
        else:
            pos = np.concatenate([s.positions() for s in window])
        if self.plan.shuffle:
            rng = _rng(self.plan.seed, self.plan.epoch, self.plan.generation, self.slot, w, _WINDOW)
            order = stratified_order(units, self.plan.topology.batch_size, rng)
            units, pos = units[order], pos[order]
        return units, pos

    def iter_windows(self) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
        """Yield ``(units_of_window, unit_ids, rows)`` per window; ``rows`` are real row
        numbers inside each unit, after ``skip`` samples were dropped."""
        to_skip = self.skip
        for w, window in enumerate(self.windows()):
            size = sum(s.size for s in window)
            if to_skip >= size:
                to_skip -= size
                continue
            units, rows = self._window_order(w, window, rows=True)
            units, rows = units[to_skip:], rows[to_skip:]
            to_skip = 0
            yield list(dict.fromkeys(s.unit for s in window)), units, rows

    def pairs(self) -> np.ndarray:
        """All ``(unit, row)`` pairs in order as an ``(n, 2)`` array (small data, tests)."""
        parts = [np.stack([u, r], axis=1) for _, u, r in self.iter_windows()]
        return np.concatenate(parts) if parts else np.empty((0, 2), dtype=np.int64)

    def remaining_segments(self, delivered: int) -> list[Segment]:
        """Segments not yet delivered after ``delivered`` samples (for elastic resume)."""
        out: list[Segment] = []
        left = self.skip + delivered
        for w, window in enumerate(self.windows()):
            size = sum(s.size for s in window)
            if left >= size:
                left -= size
                continue
            if left == 0:
                out.extend(window)
                continue
            units, pos = self._window_order(w, window)
            units, pos = units[left:], pos[left:]
            left = 0
            for u in dict.fromkeys(s.unit for s in window):
                rows = np.sort(pos[units == u])
                if len(rows):
                    out.append(Segment(u, 0, 0, rows))
        return out


def spread_order(counts: np.ndarray, slots: int, interleave: int, rng: np.random.Generator) -> np.ndarray:
    """A random order of the units in which every worker's piece, and every window of at
    most ``interleave`` units inside it, draws its samples from all over the dataset.

    Data is often stored sorted or clustered (by label, source, language, date), so
    neighbouring units are alike. A uniform permutation gives each worker a random subset,
    whose make-up can differ a lot from the whole (more so when units differ in size), and
    each window a smaller random subset that differs more. Here units are dealt out in
    file order, in runs shuffled at random, each to the worker holding the fewest samples
    so far; each worker's units are dealt to its windows the same way; units are then
    ordered by worker and window, at random inside a window. At every point of the file
    each worker, and each window, has about its share of the samples so far: a stratified
    sample instead of a simple one, with no unit read more often and no extra memory.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n = len(counts)
    worker = _deal(counts, slots, rng)
    window = np.zeros(n, dtype=np.int64)
    by_worker = np.argsort(worker, kind="stable")  # each worker's units, in file order
    for mine in np.split(by_worker, np.cumsum(np.bincount(worker, minlength=slots))[:-1]):
        window[mine] = _deal(counts[mine], -(-len(mine) // interleave), rng)
    return np.lexsort((rng.random(n), window, worker)).astype(np.int64)


def stratified_order(keys: np.ndarray, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """A random order of ``len(keys)`` samples in which every run of ``batch_size``
    consecutive samples holds each key (unit) in proportion to its share, give or take one.

    The samples, sorted by key (units in file order; inside a unit they are already in
    the epoch's random row order), are dealt out one at a time to ``ceil(n / batch_size)``
    groups in turn; the groups come in random order and each group's samples in random
    order. A uniform permutation gives batches whose make-up varies by chance around the
    window's (by a total-variation distance of about 0.075 for batches of 256 over 10
    equal classes); dealt batches are each a systematic sample of the window, so on data
    stored sorted or clustered they are close to its make-up, while which samples meet
    in a batch is still random in every epoch.
    """
    n = len(keys)
    groups = max(1, -(-n // max(1, batch_size)))
    per = -(-n // groups)
    by_key = np.argsort(keys, kind="stable")
    # deal[g, j] = j * groups + g: the j-th sample dealt to group g (past n: none); each
    # group's members are shuffled, the groups put in random order, and read group by group
    deal = np.arange(per, dtype=np.int64)[None, :] * groups + np.arange(groups, dtype=np.int64)[:, None]
    dealt = rng.permuted(deal, axis=1)[rng.permutation(groups)].ravel()
    picked: np.ndarray = by_key[dealt[dealt < n]]
    return picked


def _deal(sizes: np.ndarray, bins: int, rng: np.random.Generator) -> np.ndarray:
    """The bin of each item (given in file order): items are taken in runs of ``bins``,
    shuffled inside each run, and each goes to the bin with the fewest samples so far."""
    n = len(sizes)
    out = np.zeros(n, dtype=np.int64)
    if bins <= 1 or n == 0:
        return out
    heap = [(0, int(t), b) for b, t in enumerate(rng.permutation(bins))]  # ties: a random bin order
    sizes_list = sizes.tolist()
    for i in np.lexsort((rng.random(n), np.arange(n) // bins)).tolist():
        total, t, b = heapq.heappop(heap)
        out[i] = b
        heapq.heappush(heap, (total + sizes_list[i], t, b))
    return out


class EpochPlan:
    """The plan of one epoch (see the module docstring for the contract).

    Args:
        counts: samples per unit (``DatasetIndex.counts()``, or filtered match counts).
        topology: ranks, workers, batch size, drop_last, interleave.
        seed: base seed; the same inputs give the same plan.
        epoch: epoch number; each epoch has a different order.
        shuffle: permute units, rows and windows (False: file order throughout).
        resumes: earlier interruptions of this epoch, oldest first.
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
    ) -> None:
        self.counts = np.asarray(counts, dtype=np.int64)
        if self.counts.ndim != 1 or (self.counts < 0).any():
            raise PlanError("counts must be a 1-D array of non-negative sample counts")
        self.topology = topology
        self.seed, self.epoch, self.shuffle = int(seed), int(epoch), shuffle
        self.resumes = list(resumes)
        self.generation = 0
        self._row_perms: dict[int, np.ndarray] = {}
        self._continued = 0
        self._continuation = False
        self.stream = self._base_stream()
        for i, r in enumerate(self.resumes):
            last = i == len(self.resumes) - 1
            if last and r.topology == self.topology:
                self._cut()
                self._check(r)
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
        order = spread_order(self.counts, t.slots, t.interleave, _rng(self.seed, self.epoch, _UNITS)) if self.shuffle else np.arange(n)
        return unit_stream(self.counts, order)

    def _check(self, r: Resume) -> None:
        if r.consumed_batches > self.batches_per_worker * r.topology.num_workers:
            raise PlanError(
                f"the state says {r.consumed_batches} batches per rank were consumed, but this "
                f"epoch has only {self.batches_per_worker * r.topology.num_workers}"
            )

    def _elastic(self, r: Resume) -> None:
        """Replace the stream by what ``r.topology`` had not delivered after the interruption."""
        current = self.topology
        self.topology = r.topology
        self._cut()
        self._check(r)
        remaining: list[Segment] = []
        for slot in range(r.topology.slots):
            delivered = self._delivered(slot, r.consumed_batches) * r.topology.batch_size
            remaining.extend(self._worker(slot).remaining_segments(delivered))
        self.topology = current
        self.generation += 1
        self.stream = Stream(remaining)

    def _cut(self) -> None:
        t = self.topology
        n = self.stream.size
        quantum = t.slots * t.batch_size
        fresh = self.generation == 0  # an elastic resume may legitimately have little left
        if n == 0 and fresh:
            raise PlanError("the dataset (after filtering) has no samples to plan")
        per_slot = (n // quantum if t.drop_last else -(-n // quantum)) * t.batch_size
        if per_slot == 0 and fresh:
            raise PlanError(
                f"{n} samples are fewer than world_size*num_workers*batch_size = {quantum}; "
                "with drop_last=True no rank would get a batch (use drop_last=False or a smaller batch)"
            )
        self.samples_per_worker = per_slot
        self.num_left_out = max(0, n - per_slot * t.slots)
        self.num_padded = max(0, per_slot * t.slots - n)

    def _delivered(self, slot: int, consumed_batches: int) -> int:
        """Worker batches delivered by ``slot`` after its rank consumed ``consumed_batches``."""
        w = slot % self.topology.num_workers
        return max(0, -(-(consumed_batches - w) // self.topology.num_workers))

    def _worker(self, slot: int) -> WorkerPlan:
        start = slot * self.samples_per_worker
        segs = self.stream.slice(start, start + self.samples_per_worker)
        return WorkerPlan(self, slot, segs, 0, self.samples_per_worker)

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
            perm = _rng(self.seed, self.epoch, unit, _ROWS).permutation(n) if self.shuffle else np.arange(n)
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
            raise PlanError(f"rank {rank}/worker {worker_id} is outside world_size={t.world_size}, num_workers={t.num_workers}")
        original = (worker_id + self.consumed_batches) % t.num_workers
        slot = rank * t.num_workers + original
        wp = self._worker(slot)
        done = self._delivered(slot, self.consumed_batches) * t.batch_size
        wp.skip, wp.num_samples = done, self.samples_per_worker - done
        return wp

    def rank_batches(self, rank: int) -> list[np.ndarray]:
        """The rank's batches as ``(batch_size, 2)`` arrays of ``(unit, row)``, in the
        DataLoader's round-robin order (small data, tests and tools)."""
        t = self.topology
        per_worker = [self.worker(rank, w).pairs() for w in range(t.num_workers)]
        b = t.batch_size
        return [per_worker[j % t.num_workers][(j // t.num_workers) * b : (j // t.num_workers + 1) * b]
                for j in range(self.batches_per_rank)]

    def resume(self, consumed_batches: int, topology: Topology | None = None) -> EpochPlan:
        """The plan that continues this epoch after ``consumed_batches`` batches per rank
        (counted from this plan's start), on ``topology`` (default: the same)."""
        if not 0 <= consumed_batches <= self.batches_per_rank:
            raise PlanError(f"consumed_batches must be in [0, {self.batches_per_rank}], got {consumed_batches}")
        total = self.consumed_batches + consumed_batches
        previous = self.resumes[:-1] if self._continuation else list(self.resumes)
        point = Resume(self.topology, total)
        return EpochPlan(self.counts, topology or self.topology, seed=self.seed, epoch=self.epoch,
                         shuffle=self.shuffle, resumes=[*previous, point])
