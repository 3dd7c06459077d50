"""One entry point for every kind of epoch plan (pure numpy): a single stream, mixed
sources (random or stratified batches), and canonical workers on top of either."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np

from shardwise.errors import PlanError
from shardwise.plan.canonical import CanonicalPlan
from shardwise.plan.deal import dealt_stream
from shardwise.plan.epoch import EpochPlan
from shardwise.plan.mix import Mixing, counts_key, kept_stream
from shardwise.plan.quota import deviation
from shardwise.plan.segments import Stream
from shardwise.plan.strata import StratifiedPlan
from shardwise.plan.topology import Resume, Topology

__all__ = ["Plan", "batch_shares", "make_plan", "source_counts"]

Plan = EpochPlan | StratifiedPlan | CanonicalPlan


def make_plan(
    counts: Sequence[int] | np.ndarray,
    topology: Topology,
    *,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    resumes: Sequence[Resume] = (),
    mixing: Mixing | None = None,
    canonical_workers: int | None = None,
    blocks: int = 1,
    even_blocks: bool = False,
) -> Plan:
    """The plan of one epoch.

    Args:
        counts: samples per unit (of all sources, concatenated).
        topology: ranks, workers, per-rank batch size, drop_last, interleave.
        seed, epoch, shuffle, resumes: as for :class:`EpochPlan`.
        mixing: the sources and their rules (None: every unit once).
        canonical_workers: plan on a fixed grid so that every topology whose ranks x
            workers divide it sees the same global batches (see :mod:`.canonical`).
        blocks, even_blocks: every unit's head (its first ``1/blocks`` of rows) read first,
            in a window of every head of a window group (:mod:`.blocks`; 1: no blocks). Not
            with stratified batches.
    """
    counts = np.asarray(counts, dtype=np.int64)
    if blocks != 1 and mixing is not None and mixing.batching == "stratified":
        raise PlanError("blocks are not supported with stratified batches (batching='random')")
    plain = partial(
        _plain,
        counts,
        seed=seed,
        epoch=epoch,
        shuffle=shuffle,
        mixing=mixing,
        blocks=blocks,
        even_blocks=even_blocks,
    )
    if canonical_workers is not None:
        return CanonicalPlan(
            topology, canonical_workers, partial(plain, grid=True), resumes=resumes
        )
    return plain(topology, resumes=resumes)


def _plain(
    counts: np.ndarray,
    topology: Topology,
    *,
    seed: int,
    epoch: int,
    shuffle: bool,
    mixing: Mixing | None,
    resumes: Sequence[Resume] = (),
    grid: bool = False,
    blocks: int = 1,
    even_blocks: bool = False,
) -> EpochPlan | StratifiedPlan:
    if mixing is not None and mixing.batching == "stratified":
        return StratifiedPlan(
            counts,
            topology,
            mixing,
            seed=seed,
            epoch=epoch,
            shuffle=shuffle,
            resumes=resumes,
            grid=grid,
        )
    base = None
    if mixing is not None:
        base = partial(_mixed_stream, mixing, counts, seed=seed, epoch=epoch, shuffle=shuffle)
    plan = EpochPlan(
        counts,
        topology,
        seed=seed,
        epoch=epoch,
        shuffle=shuffle,
        resumes=resumes,
        base=base,
        blocks=blocks,
        even_blocks=even_blocks,
    )
    if mixing is not None and plan.generation == 0:  # the quotas' own rounding, reported
        out, padded = mixing.rounding(counts, resumes[0].topology if resumes else topology)
        plan.num_left_out, plan.num_padded = plan.num_left_out + out, plan.num_padded + padded
    return plan


def _mixed_stream(
    mixing: Mixing, counts: np.ndarray, topology: Topology, *, seed: int, epoch: int, shuffle: bool
) -> Stream:
    key = (mixing, counts_key(counts), topology, seed, epoch, shuffle)
    return kept_stream(
        key,
        partial(
            _build_mixed_stream, mixing, counts, topology, seed=seed, epoch=epoch, shuffle=shuffle
        ),
    )


def _build_mixed_stream(
    mixing: Mixing, counts: np.ndarray, topology: Topology, *, seed: int, epoch: int, shuffle: bool
) -> Stream:
    quotas = mixing.aligned_quotas(counts, topology)
    return dealt_stream(
        counts, mixing.bounds, quotas, topology.slots, seed=seed, epoch=epoch, shuffle=shuffle
    )


def source_counts(
    mixing: Mixing,
    counts: Sequence[int] | np.ndarray,
    topology: Topology,
    canonical_workers: int | None = None,
) -> list[int]:
    """Samples each source gives to an epoch that starts on ``topology`` (its quotas after
    rounding to whole global batches; stratified batches take them exactly too)."""
    counts = np.asarray(counts, dtype=np.int64)
    t = topology
    if canonical_workers is not None:
        c = int(canonical_workers)
        t = Topology(c, c, t.world_size * t.batch_size // c, t.drop_last, t.interleave)
    quotas: list[int] = mixing.aligned_quotas(counts, t).tolist()
    return quotas


def batch_shares(plan: Plan) -> dict[str, list[float]] | None:
    """For a stratified plan (also on canonical workers), per source how far batches are
    from its share, from the plan's start: the worst and mean ``|count - share|`` over
    global batches and over ranks' batches (the real ranks'), and the realised counts
    (:func:`~shardwise.plan.quota.deviation`). None for other plans."""
    if isinstance(plan, StratifiedPlan):
        return plan.batch_shares()
    if isinstance(plan, CanonicalPlan) and isinstance(plan.inner, StratifiedPlan):
        sched = plan.inner.stretch.schedule
        return deviation(sched, plan.consumed_batches, plan.topology.world_size)
    return None
