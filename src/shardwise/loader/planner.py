"""The dataset's planning settings, and the plans they give for an epoch and a topology.

A :class:`Planner` is made once from ``StreamingDataset``'s arguments and the counts
reading yields; the epoch and resume points it plans for are the loader state's
(:mod:`shardwise.loader.state`), passed in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.loader._args import check_int
from shardwise.plan import Mixing, Plan, Resume, Topology, auto_interleave, make_plan
from shardwise.plan.blocks import auto_blocks

__all__ = ["MIN_AUTO_BLOCKS", "MIN_AUTO_HEAD_BYTES", "Planner", "blocks_for", "interleave_for"]

# first_window="auto": head windows only when a unit's head is at most 1/8 of it, so that
# the head windows' batches (which mix fewer rows on sorted data) are at most 1/8 of an
# epoch's; fewer units (larger heads) cost more mixing (benchmarks/NOTES.md, 2026-11-28)
MIN_AUTO_BLOCKS = 8
# first_window="auto": head windows only when the units hold this many stored bytes on
# average; a smaller unit's head costs about as much to read as the whole unit (opening it,
# a page of each column), so its head window's first batch came no sooner than a whole
# window's and its epoch took more CPU (benchmarks/NOTES.md, 2026-11-29, night)
MIN_AUTO_HEAD_BYTES = 1 << 20


@dataclass(frozen=True)
class Planner:
    """What every plan of a dataset shares.

    Attributes:
        counts: samples per unit that reading yields.
        batch_size, drop_last, interleave: as given to the dataset.
        seed, shuffle: the order's seed and whether to shuffle.
        mixing: the sources' rules, if any.
        canonical_workers: ``C`` of canonical global batches, if given.
        dp_size: data-parallel ranks the plan is cut for.
        num_workers: DataLoader workers per rank, if given.
        blocks: ``k`` of head windows (:mod:`shardwise.plan.blocks`; 1: none), the same
            on every topology.
    """

    counts: np.ndarray
    batch_size: int
    drop_last: bool
    interleave: int
    seed: int
    shuffle: bool
    mixing: Mixing | None
    canonical_workers: int | None
    dp_size: int
    num_workers: int | None
    blocks: int = 1

    def topology(self, num_workers: int | None = None, world_size: int | None = None) -> Topology:
        """The topology for ``num_workers`` workers per data-parallel rank (default: the
        dataset's)."""
        world = check_int("world_size", world_size, 1, optional=True)
        workers = check_int("num_workers", num_workers, 0, optional=True)
        return Topology(
            world or self.dp_size,
            workers or self.num_workers or 1,
            self.batch_size,
            self.drop_last,
            self.interleave,
        )

    def plan(
        self,
        epoch: int,
        resumes: Sequence[Resume] = (),
        num_workers: int | None = None,
        world_size: int | None = None,
    ) -> Plan:
        """Epoch ``epoch``'s plan on that topology, continuing ``resumes`` if any."""
        return make_plan(
            self.counts,
            self.topology(num_workers, world_size),
            seed=self.seed,
            epoch=epoch,
            shuffle=self.shuffle,
            resumes=resumes,
            mixing=self.mixing,
            canonical_workers=self.canonical_workers,
            blocks=self.blocks,
        )


def interleave_for(index: Any, interleave: int | None, shuffle_bytes: int) -> int:
    """``interleave`` as given, or as many units of ``index`` as fit ``shuffle_bytes`` once
    decoded (taken as twice their stored size), between 1 and
    ``shardwise.plan.budget.MAX_AUTO_INTERLEAVE``."""
    given = check_int("interleave", interleave, 1, optional=True)
    if given is not None:
        return int(given)
    return auto_interleave(np.array([u.num_bytes for u in index.units]), shuffle_bytes)


def blocks_for(
    first_window: str | None,
    counts: np.ndarray,
    topology: Topology,
    mixing: Any,
    *,
    parts: bool = False,
    shuffle: bool = True,
    unit_bytes: float | None = None,
) -> int:
    """``k`` of head windows for ``first_window`` (1: none), for ``topology``: the dataset
    passes one rank of one worker, so that every topology of an epoch (an elastic resume's
    too) plans the same blocks. ``"heads"``: :func:`~shardwise.plan.blocks.auto_blocks`;
    ``"auto"``: the same where ``parts`` (the units are plain Parquet read in two parts,
    decided from the format and the arguments alone, never from where the files are), the
    rows are shuffled (without ``shuffle`` they come in stored order) and dealt at random,
    the units hold at least :data:`MIN_AUTO_HEAD_BYTES` stored bytes on average
    (``unit_bytes``, None: not known) and it gives at least :data:`MIN_AUTO_BLOCKS`, else 1."""
    if first_window is None:
        return 1
    if first_window not in ("auto", "heads"):
        raise ConfigError(f"first_window must be 'auto', 'heads' or None, got {first_window!r}")
    stratified = mixing is not None and mixing.batching == "stratified"
    if first_window == "heads":
        if stratified:
            raise ConfigError("first_window='heads' does not work with batching='stratified'")
        return auto_blocks(counts, topology)
    if stratified or not parts or not shuffle:
        return 1
    if unit_bytes is not None and unit_bytes < MIN_AUTO_HEAD_BYTES:
        return 1
    k = auto_blocks(counts, topology)
    return k if k >= MIN_AUTO_BLOCKS else 1
