"""Cut the input into tasks by the data, never by the worker count.

A task is a list of whole units (Parquet row groups, JSONL byte ranges, tar shards) of
about ``target_bytes``; for Parquet, where a unit can be cut safely, units may be split
into row ranges so that tasks (and the files they write) come out balanced.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardwise.dedup.sets import distinct
from shardwise.index import DatasetIndex

__all__ = ["Piece", "plan_tasks"]


@dataclass(frozen=True)
class Piece:
    """Rows ``[lo, hi)`` of unit ``unit`` (``hi == -1``: the whole unit)."""

    unit: int
    lo: int = 0
    hi: int = -1


MIN_SPLIT = 8
MIN_TASK_BYTES = 2**20


def plan_tasks(
    index: DatasetIndex, target_bytes: int, min_tasks: int = 1, work: float = 1.0
) -> list[list[Piece]]:
    """Group the dataset's units into at least ``min_tasks`` tasks of about ``target_bytes``
    of work: input bytes times ``work``, the CPU cost per byte of the heaviest operator
    (1.0: reading and writing), so a CPU-heavy stage on a small input still gets tasks
    for every core. Past ``MIN_SPLIT`` tasks, their number is a multiple of it (unless
    ``min_tasks`` asks for a count), so 2, 4 or 8 workers get equal shares. Nothing here
    depends on the backend or the worker count."""
    units = index.units
    if not units:
        return []
    sizes = np.array([max(u.num_bytes, 1) for u in units], dtype=np.float64)
    total = float(sizes.sum()) * max(work, 1.0)
    # at least MIN_SPLIT tasks once there is enough work (so even a modest input keeps
    # every core of a small machine busy), but none under MIN_TASK_BYTES for that reason
    n = max(
        min_tasks,
        math.ceil(total / max(target_bytes, 1)),
        min(MIN_SPLIT, int(total // MIN_TASK_BYTES)),
        1,
    )
    if n > MIN_SPLIT and min_tasks <= 1:  # whole waves for 2, 4 or 8 workers (9 tasks on 2 cores
        n = (
            -(-n // MIN_SPLIT) * MIN_SPLIT
        )  # would leave one idle for the last); a count asked for is kept
    if index.format == "parquet":
        return _split_rows(index, n)
    n = min(n, len(units))
    bounds = (
        np.searchsorted(np.cumsum(sizes), np.arange(1, n) * float(sizes.sum()) / n, side="left") + 1
    )
    groups = np.split(np.arange(len(units)), distinct(np.clip(bounds, 1, len(units) - 1)))
    return [[Piece(int(u)) for u in g] for g in groups if len(g)]


def _split_rows(index: DatasetIndex, n: int) -> list[list[Piece]]:
    counts = index.counts()
    total = int(counts.sum())
    if total == 0:
        return [[Piece(i) for i in range(len(counts))]]
    n = min(n, total)
    ends = np.cumsum(counts)
    tasks: list[list[Piece]] = []
    for t in range(n):
        a, b = t * total // n, (t + 1) * total // n
        pieces: list[Piece] = []
        u = int(np.searchsorted(ends, a, side="right"))
        while u < len(counts) and a < b:
            start = int(ends[u] - counts[u])
            lo, hi = a - start, min(b, int(ends[u])) - start
            pieces.append(Piece(u) if (lo == 0 and hi == counts[u]) else Piece(u, lo, hi))
            a = start + hi
            u += 1
        tasks.append(pieces)
    # units with no rows still count as input (nothing to read, but keep them visible)
    return tasks
