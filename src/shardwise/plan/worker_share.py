"""What one (rank, worker) yields: its piece of the stream, in windows (pure numpy)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Protocol

import numpy as np

from shardwise.plan.blocks import LEAD_SHARE, Blocks, block_windows
from shardwise.plan.order import WINDOW, rng_for, stratified_order
from shardwise.plan.segments import Segment
from shardwise.plan.topology import Topology

__all__ = ["Orders", "WorkerPlan"]


class Orders(Protocol):
    """What a worker's piece needs of its epoch: the seeds and the rows' order."""

    seed: int
    epoch: int
    generation: int
    shuffle: bool

    def row_perm(self, unit: int) -> np.ndarray:
        """The epoch's row order of ``unit``."""
        ...


@dataclass
class WorkerPlan:
    """What one (rank, worker) yields: windows of ``(unit, row)`` pairs, in order.

    Attributes:
        plan: the epoch's seeds and row orders (its :class:`EpochPlan`).
        topology: the topology this piece was cut for (the plan's own, or an earlier one
            while an elastic resume works out what it had delivered).
        slot: ``rank * num_workers + worker``.
        segments: this worker's piece of the stream.
        skip: samples already delivered before a resume (skipped, not re-read).
        num_samples: samples this worker yields in the epoch (after ``skip``).
        blocks: units cut into blocks of rows, each group of segments read as one window
            per block (:mod:`.blocks`); None: a window per group.
    """

    plan: Orders
    topology: Topology
    slot: int
    segments: list[Segment]
    skip: int = 0
    num_samples: int = 0
    blocks: Blocks | None = None
    _perms: dict[int, np.ndarray] = field(default_factory=dict, repr=False)

    def windows(self) -> list[list[Segment]]:
        """The segments cut into the fewest windows of at most ``interleave``, of equal
        size (give or take one): a last window of a few units would mix poorly. With
        :attr:`blocks`, each such group is read as one window per block, the first group's
        head window as a lead window and the rest of its heads (:mod:`.blocks`)."""
        k = self.topology.interleave
        n = len(self.segments)
        count = -(-n // k)
        bounds = [i * n // count for i in range(count + 1)] if n else [0]
        groups = [self.segments[a:b] for a, b in pairwise(bounds)]
        if self.blocks is None or self.blocks.k <= 1:
            return groups
        lead, most = self.topology.batch_size, sum(s.size for s in self.segments) // LEAD_SHARE
        return [
            w
            for i, g in enumerate(groups)
            for w in block_windows(g, self.blocks, lead * (i == 0), most)
        ]

    def units(self) -> list[int]:
        """Units this worker reads, in first-use order (for prefetching)."""
        seen: dict[int, None] = {}
        for s in self.segments:
            seen.setdefault(s.unit, None)
        return list(seen)

    def _window_order(
        self, w: int, window: list[Segment], *, rows: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Unit ids and positions of the window's samples in emitted order; with ``rows``,
        real row numbers (the epoch's row permutation applied) instead of positions."""
        units = np.repeat(
            np.array([s.unit for s in window], dtype=np.int64), [s.size for s in window]
        )
        if rows:
            perms = [self.plan.row_perm(s.unit) for s in window]
            pos = np.concatenate(
                [p[s.lo : s.hi] if s.rows is None else p[s.rows] for p, s in zip(perms, window)]
            )
        else:
            pos = np.concatenate([s.positions() for s in window])
        if self.plan.shuffle:
            rng = rng_for(
                self.plan.seed, self.plan.epoch, self.plan.generation, self.slot, w, WINDOW
            )
            order = stratified_order(units, self.topology.batch_size, rng)
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

    def window_units(self) -> list[list[int]]:
        """The units of each window :meth:`iter_windows` yields, without working out its order."""
        out: list[list[int]] = []
        to_skip = self.skip
        for window in self.windows():
            size = sum(s.size for s in window)
            if to_skip >= size:
                to_skip -= size
                continue
            to_skip = 0
            out.append(list(dict.fromkeys(s.unit for s in window)))
        return out

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
