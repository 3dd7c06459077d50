"""Blockwise windows (pure numpy): a worker's first window made of every unit's first
rows, so that a reader decoding units in stored order has it after a fraction of them.

With ``blocks = k`` (:class:`Blocks`), every unit of ``n`` rows is cut into blocks of
consecutive stored rows: by default two, a *head* of its first ``n // k`` rows and the rest;
with ``even=True``, ``k`` blocks ``[j * n // k, (j + 1) * n // k)``. The epoch's row order of
a unit permutes rows only inside each block (:func:`block_perm`): position ``p`` of the unit
(the plan's permuted-row coordinate, :mod:`.segments`) is a row of the block ``p`` is in.

A worker still cuts its piece into groups of up to ``interleave`` segments, as many as
needed, of equal size (:meth:`~.worker_share.WorkerPlan.windows` without blocks). Each
group is then read as one window per block: window ``j`` of a group holds block ``j`` of
every segment of the group (the part of the segment inside it), its rows in the same
stratified order as any window. So:

- every position of every segment is in exactly one window (the blocks partition the
  unit), whatever the segments are (whole units, parts of units at a piece's ends,
  explicit rows left over by an elastic resume): the contracts of :mod:`.epoch` hold;
- a reader decoding a unit's rows in stored order (page by page) has the head window's
  rows after decoding about ``1/k`` of every unit of the group;
- the head window mixes rows of every unit of the group. On data stored sorted, where a
  unit holds a few labels, a window of short blocks holds few labels: ``k`` even blocks
  raise the mean batch TVD a lot (label-sorted, 10 labels, batches of 256, 17 units: 0.034
  without blocks, 0.136 with 17 even blocks; 7 units: 0.054 and 0.26), the head and the
  rest much less (0.054 and 0.091): only the head window's batches are worse.

A worker's first head window is read as two (:func:`lead_windows`): a *lead window* of the
heads of its first segments, the fewest (and at least two) whose head rows make a batch,
then the group's other heads. Every head read costs a fixed 8-14 ms (its pages found and
their dictionaries decoded, whatever its rows), so the first batch of a head window of 25
units came after 25 heads; after the lead window's few heads it comes after about one
unit's decoding. The lead window's batches mix only its few units, so it is made only
when it holds at most ``1/LEAD_SHARE`` of the worker's samples.

``k = 1`` is the plan without blocks, unchanged. The layout saved states record for a plan
with blocks is :data:`BLOCKS_LAYOUT`; the loader makes such plans with
``StreamingDataset(first_window="heads")``, and by default (``"auto"``) where
``shardwise.loader.planner.blocks_for`` says (:mod:`shardwise.loader.batches.heads`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

from shardwise.plan.segments import Segment
from shardwise.plan.topology import Topology

__all__ = [
    "BLOCKS_LAYOUT",
    "LEAD_SHARE",
    "MIN_BLOCK_ROWS",
    "Blocks",
    "auto_blocks",
    "block_bounds",
    "block_perm",
    "block_windows",
    "head_window",
    "lead_windows",
]

# the layout of plans with blocks (k > 1): rows permuted inside blocks, windows of blocks,
# a worker's first head window read as a lead window and the rest of its heads (5: since
# 2026-11-30; 4 had no lead window)
BLOCKS_LAYOUT = 5
MIN_BLOCK_ROWS = 16  # auto_blocks: a mean unit's head holds at least this many rows
# a lead window holds at most 1/LEAD_SHARE of a worker's samples (its batches mix few units)
LEAD_SHARE = 64


@dataclass(frozen=True)
class Blocks:
    """Every unit's rows in blocks (see the module docstring).

    Attributes:
        counts: rows per unit (the epoch plan's counts).
        k: the head is ``1/k`` of a unit (``even``: ``k`` equal blocks).
        even: ``k`` equal blocks instead of a head and the rest.
    """

    counts: np.ndarray
    k: int
    even: bool = False

    def bounds(self, unit: int) -> np.ndarray:
        """The block boundaries of ``unit``, in positions (and stored rows)."""
        return block_bounds(int(self.counts[unit]), self.k, self.even)


def block_bounds(n: int, k: int, even: bool = False) -> np.ndarray:
    """Boundaries of the blocks of ``n`` rows: ``[0, n // k, n]`` (a head and the rest), or
    with ``even`` those of ``k`` equal blocks; ``[0, n]`` for ``k = 1``."""
    if k <= 1:
        return np.array([0, n], dtype=np.int64)
    if even:
        return np.arange(k + 1, dtype=np.int64) * n // k
    return np.array([0, n // k, n], dtype=np.int64)


def auto_blocks(counts: np.ndarray, topology: Topology) -> int:
    """``k`` for ``topology``: the units of one window group, so that the head window holds
    about one unit's rows, but no more than leaves a mean unit's head
    :data:`MIN_BLOCK_ROWS` rows and a group's head window (:func:`head_window`) a batch
    (at least 1), after the rows that ``drop_last`` leaves out of the epoch: cutting
    ``d`` rows off a unit's positions takes at most ``d / k`` rows from its head, so
    the head window may lose ``ceil(d / k)``. (A head window of less than a batch makes
    the first batch wait for the next window, every unit's rest.)"""
    counts = np.asarray(counts, dtype=np.int64)
    live = counts[counts > 0]
    if not len(live):
        return 1
    group = min(topology.interleave, -(-len(live) // topology.slots))
    mean = int(live.mean())
    dropped = int(live.sum()) % (topology.slots * topology.batch_size) if topology.drop_last else 0
    for k in range(group, 1, -1):
        window = head_window(live, group, k) - -(-dropped // k)
        if mean // k >= MIN_BLOCK_ROWS and window >= topology.batch_size:
            return k
    return 1


def head_window(live: np.ndarray, group: int, k: int) -> int:
    """The rows of the head window of a group of ``group`` of the units of ``live`` rows
    each, with heads of ``1/k``: exactly when the group is every unit; else for units of
    the mean's size less the standard deviation of a mean of ``group`` units. An epoch's
    groups are runs of its shuffled units, so a first group of smaller units than the mean
    is common: on 50 units of 50-400 rows in groups of 13, the mean's own heads left the
    first head window short of a batch, and the first batch waited for every unit's rest."""
    if group >= len(live):
        return int((live // k).sum())
    low = float(live.mean()) - float(live.std()) / group**0.5
    return group * (max(int(low), 0) // k)


def block_perm(bounds: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A random order of the rows ``[0, bounds[-1])`` that permutes them only inside each
    block (one block: ``rng.permutation(n)``, the plan's order without blocks)."""
    n = int(bounds[-1])
    if len(bounds) <= 2:
        return rng.permutation(n)
    parts = [lo + rng.permutation(hi - lo) for lo, hi in pairwise(bounds.tolist())]
    return np.concatenate(parts).astype(np.int64, copy=False)


def _part(seg: Segment, lo: int, hi: int) -> Segment | None:
    """The part of ``seg`` whose positions are in ``[lo, hi)``, or None if empty."""
    if seg.rows is not None:
        rows = seg.rows[(seg.rows >= lo) & (seg.rows < hi)]
        return Segment(seg.unit, 0, 0, rows) if len(rows) else None
    a, b = max(seg.lo, lo), min(seg.hi, hi)
    return Segment(seg.unit, a, b) if b > a else None


def block_windows(
    group: list[Segment], blocks: Blocks, lead_rows: int = 0, lead_max: int = 0
) -> list[list[Segment]]:
    """The windows of one window group: window ``j`` holds block ``j`` of every segment
    of ``group``, in the group's order; empty windows are left out. With ``lead_rows``
    (a worker's first group), its head window (block 0: none after a resume that left
    only rests) is read as :func:`lead_windows` of at most ``lead_max`` rows."""
    bounds = [blocks.bounds(s.unit).tolist() for s in group]
    out: list[list[Segment]] = []
    for j in range(max((len(b) for b in bounds), default=1) - 1):
        window = [
            part for s, b in zip(group, bounds) if (part := _part(s, b[j], b[j + 1])) is not None
        ]
        if window and j == 0 and lead_rows > 0:
            out.extend(lead_windows(window, lead_rows, lead_max))
        elif window:
            out.append(window)
    return out


def lead_windows(window: list[Segment], rows: int, most: int) -> list[list[Segment]]:
    """``window`` as a lead window of its first segments, the fewest (at least two) that
    hold ``rows`` samples, and a window of the others; as it is when that takes them all
    or more than ``most`` samples."""
    sizes = np.cumsum([s.size for s in window])
    lead = max(2, int(np.searchsorted(sizes, rows)) + 1)
    if lead >= len(window) or sizes[lead - 1] > most:
        return [window]
    return [window[:lead], window[lead:]]
