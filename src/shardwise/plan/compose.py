"""Workers made of other workers' batches (pure numpy): stratified mixing and canonical
workers build each batch from whole batches of smaller plans.

A :class:`ComposedWorker` holds its ``(unit, row)`` sequence as two arrays (a worker's
share of one epoch; the loader holds as much for a plain worker) and the places where
one of its parts starts a new window, so it reads the same windows its parts would.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Protocol

import numpy as np

__all__ = [
    "ComposedWorker",
    "Part",
    "WorkerWindows",
    "compose",
    "part_of",
    "round_robin_batches",
    "round_robin_count",
]


class WorkerWindows(Protocol):
    """What a worker yields, window by window (a ``WorkerPlan`` or a ``ComposedWorker``)."""

    slot: int
    skip: int
    num_samples: int

    def iter_windows(self) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
        """Yield ``(units_of_window, unit_ids, rows)`` per window."""
        ...

    def units(self) -> list[int]:
        """Units read, in first-use order."""
        ...

    def window_units(self) -> list[list[int]]:
        """The units of each window :meth:`iter_windows` yields."""
        ...


@dataclass(frozen=True)
class Part:
    """A worker's sequence cut into batches: ``unit_ids``/``rows`` of ``batch_size`` each,
    and the batch indices at which one of its windows starts."""

    unit_ids: np.ndarray
    rows: np.ndarray
    batch_size: int
    starts: np.ndarray

    @property
    def num_batches(self) -> int:
        return len(self.rows) // self.batch_size


def part_of(worker: WorkerWindows, batch_size: int) -> Part:
    """The sequence of ``worker`` (after what it skips) as a :class:`Part`."""
    units: list[np.ndarray] = []
    rows: list[np.ndarray] = []
    starts = [0]
    for _, u, r in worker.iter_windows():
        units.append(u)
        rows.append(r)
        starts.append(starts[-1] + len(r))
    empty = np.empty(0, dtype=np.int64)
    first_batch = np.asarray(starts[:-1], dtype=np.int64) // batch_size
    return Part(
        np.concatenate(units) if units else empty,
        np.concatenate(rows) if rows else empty,
        batch_size,
        np.unique(first_batch),
    )


def compose(slot: int, parts: Sequence[Part], take: Sequence[np.ndarray]) -> ComposedWorker:
    """A worker whose batch ``t`` is, part after part, batch ``take[i][t]`` of ``parts[i]``
    (``take[i]`` increasing; -1: that part gives nothing to batch ``t``)."""
    n = len(take[0]) if take else 0
    cols_u, cols_r, starts = [], [], [np.zeros(1, dtype=np.int64)]
    for part, idx in zip(parts, take):
        used = idx >= 0
        b = part.batch_size
        rows_of = (idx[:, None] * b + np.arange(b)[None, :]).clip(0)
        cols_u.append(np.where(used[:, None], part.unit_ids[rows_of] if len(part.rows) else -1, -1))
        cols_r.append(np.where(used[:, None], part.rows[rows_of] if len(part.rows) else -1, -1))
        # composed batches where one of this part's windows begins
        begins = np.isin(idx, part.starts) & used
        starts.append(np.flatnonzero(begins))
    u = np.concatenate(cols_u, axis=1).ravel() if cols_u else np.empty(0, dtype=np.int64)
    r = np.concatenate(cols_r, axis=1).ravel() if cols_r else np.empty(0, dtype=np.int64)
    keep = u >= 0
    per_batch = keep.reshape(n, -1).sum(axis=1) if n else np.zeros(0, dtype=np.int64)
    row_starts = np.concatenate([[0], np.cumsum(per_batch)])[np.unique(np.concatenate(starts))]
    return ComposedWorker(slot, u[keep], r[keep], row_starts)


@dataclass
class ComposedWorker:
    """A worker's ``(unit, row)`` sequence with its window starts (row offsets).

    Attributes:
        slot: the worker's slot (``rank * num_workers + worker``).
        unit_ids, rows: the sequence.
        starts: row offsets where a window begins (sorted, from 0).
        skip: samples at the start not to yield (a worker's own resume point).
        num_samples: samples yielded (after ``skip``).
    """

    slot: int
    unit_ids: np.ndarray
    rows: np.ndarray
    starts: np.ndarray
    skip: int = 0
    num_samples: int = -1

    def __post_init__(self) -> None:
        if self.num_samples < 0:
            self.num_samples = len(self.rows) - self.skip

    def iter_windows(self) -> Iterator[tuple[list[int], np.ndarray, np.ndarray]]:
        """Yield ``(units_of_window, unit_ids, rows)`` per window, after ``skip`` samples."""
        n = len(self.rows)
        edges = np.unique(np.concatenate([self.starts[self.starts < n], [n]]))
        for a, b in pairwise(edges.tolist()):
            a = max(a, self.skip)
            if a >= b:
                continue
            u = self.unit_ids[a:b]
            first, at = np.unique(u, return_index=True)
            yield first[np.argsort(at)].tolist(), u, self.rows[a:b]

    def window_units(self) -> list[list[int]]:
        """The units of each window :meth:`iter_windows` yields."""
        return [units for units, _, _ in self.iter_windows()]

    def units(self) -> list[int]:
        """Units this worker reads, in first-use order."""
        first, at = np.unique(self.unit_ids[self.skip :], return_index=True)
        units: list[int] = first[np.argsort(at)].tolist()
        return units

    def pairs(self) -> np.ndarray:
        """All ``(unit, row)`` pairs in order as an ``(n, 2)`` array (small data, tests)."""
        return np.stack([self.unit_ids[self.skip :], self.rows[self.skip :]], axis=1)


def round_robin_count(batches_per_rank: int, worker: int, num_workers: int) -> int:
    """Batches worker ``worker`` gives of its rank's ``batches_per_rank`` (round-robin from 0)."""
    return max(0, -(-(batches_per_rank - worker) // num_workers))


def round_robin_batches(
    per_worker: Sequence[np.ndarray], batch_size: int, num_batches: int
) -> list[np.ndarray]:
    """A rank's ``num_batches`` batches from its workers' ``(unit, row)`` pairs, batch ``j``
    from worker ``j % len(per_worker)`` (a DataLoader's round-robin)."""
    w, b = len(per_worker), batch_size
    return [per_worker[j % w][(j // w) * b : (j // w + 1) * b] for j in range(num_batches)]
