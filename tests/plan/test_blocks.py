"""Blockwise windows (plan/blocks.py): every unit's rows in blocks, each window group read
as one window per block; the epoch plan's contracts hold with any block count."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from _plans import plan_or_none, topologies
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import EpochPlan, Topology
from shardwise.plan.blocks import (
    LEAD_SHARE,
    MIN_BLOCK_ROWS,
    Blocks,
    auto_blocks,
    block_perm,
    block_windows,
    head_window,
    lead_windows,
)
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import Plan, make_plan
from shardwise.plan.segments import Segment

counts_st = st.one_of(
    st.lists(st.integers(0, 60), min_size=1, max_size=30),  # includes empty units
    st.lists(st.integers(0, 5), min_size=1, max_size=3).map(lambda c: c + [500]),  # a giant
    st.lists(st.integers(1, 30), min_size=1, max_size=3),  # fewer units than workers
)
topo_st = topologies(4, 3)
blocks_st = st.integers(1, 9)
even_st = st.booleans()
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _samples(plan: Plan, k: int | None = None) -> list[tuple[int, int]]:
    return [
        (int(u), int(r))
        for rank in range(plan.topology.world_size)
        for b in plan.rank_batches(rank)[:k]
        for u, r in b.tolist()
    ]


@given(n=st.integers(0, 500), k=st.integers(1, 12), even=st.booleans(), seed=st.integers(0, 5))
@settings(max_examples=80, deadline=None)
def test_block_perm_permutes_rows_only_inside_their_block(
    n: int, k: int, even: bool, seed: int
) -> None:
    bounds = Blocks(np.array([n]), k, even).bounds(0)
    assert bounds[0] == 0 and bounds[-1] == n and (np.diff(bounds) >= 0).all()
    assert len(bounds) == (1 if k == 1 else k if even else 2) + 1
    perm = block_perm(bounds, np.random.default_rng(seed))
    assert sorted(perm.tolist()) == list(range(n))
    block_of = np.searchsorted(bounds, np.arange(n), side="right") - 1
    assert (block_of[perm] == block_of).all()  # position p holds a row of p's block
    assert perm.tolist() == block_perm(bounds, np.random.default_rng(seed)).tolist()
    if k == 1:  # no blocks: the plan's order without blocks
        assert perm.tolist() == np.random.default_rng(seed).permutation(n).tolist()


@SETTINGS
@given(counts=counts_st, t=topo_st, blocks=blocks_st, even=even_st, seed=st.integers(0, 3))
def test_every_row_once_and_equal_steps(
    counts: list[int], t: Topology, blocks: int, even: bool, seed: int
) -> None:
    plan = plan_or_none(counts, t, seed=seed, epoch=1, blocks=blocks, even_blocks=even)
    if plan is None:
        return
    per_rank = [plan.rank_batches(r) for r in range(t.world_size)]
    assert len({len(b) for b in per_rank}) == 1
    samples = _samples(plan)
    valid = {(u, r) for u, c in enumerate(counts) for r in range(c)}
    if t.drop_last:
        assert len(samples) == len(set(samples)) and set(samples) <= valid
        assert sum(counts) - len(samples) == plan.num_left_out
    else:
        assert set(samples) == valid
        assert len(samples) - sum(counts) == plan.num_padded
    again = EpochPlan(counts, t, seed=seed, epoch=1, blocks=blocks, even_blocks=even)
    assert samples == _samples(again)  # deterministic


@SETTINGS
@given(counts=counts_st, t=topo_st, blocks=blocks_st, even=even_st, seed=st.integers(0, 3))
def test_a_window_takes_one_block_of_each_unit(
    counts: list[int], t: Topology, blocks: int, even: bool, seed: int
) -> None:
    """Rows of a unit in one window are stored rows of one block (a reader decoding units
    in stored order has a window's rows once it decoded that block of each unit), and the
    blocks of a unit come in order."""
    plan = plan_or_none(counts, t, seed=seed, blocks=blocks, even_blocks=even)
    if plan is None:
        return
    b = Blocks(np.asarray(counts), blocks, even)
    for rank in range(t.world_size):
        for w in range(t.num_workers):
            last: dict[int, int] = {}
            for units, unit_ids, rows in plan.worker(rank, w).iter_windows():
                assert set(unit_ids.tolist()) <= set(units)
                for u in set(unit_ids.tolist()):
                    j = np.searchsorted(b.bounds(u), rows[unit_ids == u], side="right") - 1
                    assert len(set(j.tolist())) == 1
                    if t.drop_last:  # (padding may take a unit's first rows again)
                        assert last.get(u, -1) < int(j[0])
                    last[u] = int(j[0])


def test_one_block_is_the_plan_without_blocks() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        counts = rng.integers(0, 80, size=int(rng.integers(1, 20)))
        counts[0] += 40
        t = Topology(int(rng.integers(1, 3)), int(rng.integers(1, 3)), 3, True, 2)
        a, b = EpochPlan(counts, t, seed=3), EpochPlan(counts, t, seed=3, blocks=1)
        assert _samples(a) == _samples(b)
        assert _samples(a) != _samples(EpochPlan(counts, t, seed=3, blocks=4))


@SETTINGS
@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=25),
    t=topo_st,
    blocks=blocks_st,
    even=even_st,
    frac=st.floats(0, 1),
)
def test_same_topology_resume_continues_exactly(
    counts: list[int], t: Topology, blocks: int, even: bool, frac: float
) -> None:
    plan = plan_or_none(counts, t, seed=2, epoch=1, blocks=blocks, even_blocks=even)
    if plan is None:
        return
    k = int(frac * plan.batches_per_rank)
    resumed = plan.resume(k)
    kept = [(b.k, b.even) if b else None for b in (plan.blocks, resumed.blocks)]
    assert kept[0] == kept[1]
    for r in range(t.world_size):
        full, rest = plan.rank_batches(r), resumed.rank_batches(r)
        assert len(rest) == len(full) - k
        assert all((a == b).all() for a, b in zip(full[k:], rest))


@SETTINGS
@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=25),
    t=topo_st,
    t2=topo_st,
    blocks=blocks_st,
    even=even_st,
    frac=st.floats(0, 1),
    frac2=st.floats(0, 1),
)
def test_elastic_resume_never_repeats_or_loses(
    counts: list[int],
    t: Topology,
    t2: Topology,
    blocks: int,
    even: bool,
    frac: float,
    frac2: float,
) -> None:
    t2 = Topology(t2.world_size, t2.num_workers, t2.batch_size, t.drop_last, t2.interleave)
    assume(t2 != t)
    plan = plan_or_none(counts, t, seed=5, epoch=2, blocks=blocks, even_blocks=even)
    if plan is None:
        return
    k = int(frac * plan.batches_per_rank)
    before, planned = _samples(plan, k), _samples(plan)
    after_plan = plan.resume(k, t2)
    assert len({len(after_plan.rank_batches(r)) for r in range(t2.world_size)}) == 1
    # a second interruption, back on the first topology
    k2 = int(frac2 * after_plan.batches_per_rank)
    last_plan = after_plan.resume(k2, t)
    middle, last = _samples(after_plan, k2), _samples(last_plan)
    if t.drop_last:
        combined = before + middle + last
        assert len(combined) == len(set(combined))  # nothing consumed twice
        assert set(combined) <= set(planned)
    else:  # each resume: every sample not delivered yet, once, and its own padding only
        left, rest = set(planned) - set(before), _samples(after_plan)
        assert set(rest) == left and len(rest) - len(left) == after_plan.num_padded
        left -= set(middle)
        assert set(last) == left and len(last) - len(left) == last_plan.num_padded


def _global(plan: Plan) -> bytes:
    n = plan.topology.world_size
    per_rank = [plan.rank_batches(r) for r in range(n)]
    assert len({len(b) for b in per_rank}) == 1
    batches = [np.concatenate([b[i] for b in per_rank]) for i in range(plan.batches_per_rank)]
    return np.concatenate(batches or [np.empty((0, 2), dtype=np.int64)]).tobytes()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=st.sampled_from([2, 4, 6]),
    counts=st.lists(st.integers(0, 60), min_size=1, max_size=25),
    blocks=st.integers(2, 6),
    even=even_st,
    mixed=st.booleans(),
    seed=st.integers(0, 9),
)
def test_canonical_workers_same_global_batches_with_blocks(
    c: int, counts: list[int], blocks: int, even: bool, mixed: bool, seed: int
) -> None:
    g = 2 * c
    mixing = None
    if mixed and len(counts) > 1:
        mixing = Mixing((0, 1, len(counts)), (Rule(weight=1), Rule(weight=3)))
    seqs = set()
    for n, w in [(n, w) for n in range(1, c + 1) for w in range(1, c + 1) if c % (n * w) == 0]:
        if g % n:
            continue
        t = Topology(n, w, g // n, True, 2)
        try:
            plan = make_plan(
                counts, t, seed=seed, mixing=mixing, canonical_workers=c, blocks=blocks
            )
        except PlanError:
            seqs.add(b"error")
            continue
        seqs.add(_global(plan))
    assert len(seqs) == 1


def _mean_tvd(counts: np.ndarray, t: Topology, blocks: int, even: bool = False) -> float:
    """Mean TVD from the global mix of batches of rank 0 on data sorted by 10 labels."""
    labels = 10
    plan = EpochPlan(counts, t, seed=3, blocks=blocks, even_blocks=even)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    tvd = []
    for b in plan.rank_batches(0):
        label = (starts[b[:, 0]] + b[:, 1]) * labels // counts.sum()
        got = np.bincount(label, minlength=labels) / len(b)
        tvd.append(0.5 * np.abs(got - 1 / labels).sum())
    return float(np.mean(tvd))


def test_a_head_window_keeps_sorted_data_mixed() -> None:
    """Label-sorted units: the head window holds every unit's head (after the lead window
    of two), so only its batches are less mixed, and the epoch's mean TVD stays below that
    of i.i.d. batches (0.075 for batches of 256 over 10 labels; a ramp of small first
    windows gave about 0.5).
    Even blocks make every window one of short, single-label blocks: far worse."""
    counts = np.random.default_rng(0).integers(3000, 9000, 17)
    t = Topology(1, 1, 256, interleave=64)
    k = auto_blocks(counts, t)
    assert k == 17
    none, head, even = (
        _mean_tvd(counts, t, 1),
        _mean_tvd(counts, t, k),
        _mean_tvd(counts, t, k, True),
    )
    assert none < head < 0.075 < 0.1 < even


def test_auto_blocks_and_errors() -> None:
    t = Topology(2, 2, 8, interleave=4)
    assert auto_blocks(np.array([10_000] * 40), t) == 4  # a window group's units
    assert auto_blocks(np.array([10_000] * 6), t) == 2  # a piece's units
    assert auto_blocks(np.array([MIN_BLOCK_ROWS * 2] * 40), t) == 2  # heads not too small
    assert auto_blocks(np.array([100] * 40), Topology(1, 1, 200, interleave=4)) == 2  # a batch
    assert auto_blocks(np.array([0, 0]), t) == 1
    # uneven units of which drop_last leaves 232 rows out: heads of 1/3 would give a head
    # window of 255 rows (less than a batch: the first batch would wait for every rest)
    images, one = np.array([250, 250, 228, 22, 157, 64, 29]), Topology(1, 1, 256, interleave=18)
    assert auto_blocks(images, one) == 2
    for seed in range(5):
        first = make_plan(images, one, seed=seed, blocks=2).worker(0, 0).windows()[0]
        assert sum(s.size for s in first) >= 256
    assert auto_blocks(images, Topology(1, 1, 256, drop_last=False, interleave=18)) == 3
    for bad in (0, -1, True, 2.5):
        with pytest.raises(PlanError, match="blocks"):
            EpochPlan([5, 5], Topology(1), blocks=bad)  # type: ignore[arg-type]
    strat = Mixing((0, 1, 2), (Rule(), Rule()), batching="stratified")
    with pytest.raises(PlanError, match="stratified"):
        make_plan([5, 5], Topology(1), mixing=strat, blocks=2)


def test_a_first_group_of_smaller_units_still_has_a_batch_of_heads() -> None:
    """Units of uneven sizes in groups of fewer than all of them: an epoch's first group
    is a run of its shuffled units, often smaller than the mean ones. Heads sized for the
    mean left the first head window short of a batch in half the epochs (10 of 20 here), and
    the first batch waited for every unit's rest."""
    counts = np.random.default_rng(5).integers(50, 401, 50)
    t = Topology(1, 1, 256, interleave=13)
    k = auto_blocks(counts, t)
    assert k >= 8  # still enough blocks for first_window="auto" to take them
    first = [
        sum(
            s.size
            for s in make_plan(counts, t, seed=0, epoch=e, blocks=k).worker(0, 0).windows()[0]
        )
        for e in range(20)
    ]
    assert sum(f < 256 for f in first) <= 3, first
    live = counts[counts > 0]
    assert head_window(live, 13, k) >= 256
    assert head_window(live, 50, k) == int((live // k).sum())  # every unit: exact


@SETTINGS
@given(counts=counts_st, t=topo_st, blocks=st.integers(2, 9), even=even_st)
def test_blocks_keep_each_workers_units(
    counts: list[int], t: Topology, blocks: int, even: bool
) -> None:
    """Blocks change the order inside a worker's piece, never the piece: each worker reads
    the same units (locality and read amplification as without blocks)."""
    plain = plan_or_none(counts, t, seed=1)
    if plain is None:
        return
    blocked = EpochPlan(counts, t, seed=1, blocks=blocks, even_blocks=even)
    for rank in range(t.world_size):
        for w in range(t.num_workers):
            a, b = plain.worker(rank, w), blocked.worker(rank, w)
            assert set(a.units()) == set(b.units())
            assert Counter(u for u, _ in a.pairs().tolist()) == Counter(
                u for u, _ in b.pairs().tolist()
            )


def test_a_lead_window_is_the_fewest_heads_that_make_a_batch() -> None:
    """The first of a worker's head windows takes the heads of its first segments, the
    fewest (at least two) that hold a batch, if they hold at most ``lead_max`` samples; the
    group's other heads come next."""
    blocks = Blocks(np.array([400, 80, 800, 400, 400, 40]), 4)  # heads of 100, 20, 200, ...
    group = [Segment(u, 0, int(n)) for u, n in enumerate(blocks.counts)]
    plain = block_windows(group, blocks)
    assert [[s.unit for s in w] for w in plain] == [list(range(6))] * 2
    heads = [s.size for s in plain[0]]
    assert heads == [100, 20, 200, 100, 100, 10]
    for rows, lead in ((1, 2), (120, 2), (121, 3), (320, 3), (321, 4), (520, 5)):
        led = block_windows(group, blocks, rows, 520)
        assert [len(w) for w in led] == [lead, 6 - lead, 6], rows
        assert led[0] + led[1] == plain[0] and led[2] == plain[1]
        assert block_windows(group, blocks, rows, sum(heads[:lead]) - 1) == plain  # too many
    assert block_windows(group, blocks, 521, 10**6) == plain  # every head needed: one window
    assert lead_windows(plain[0][:2], 1, 10**6) == [plain[0][:2]]  # two heads: no split
    assert lead_windows(plain[0][:1], 1, 10**6) == [plain[0][:1]]
    counts = [2000] * 200
    t = Topology(2, 2, 16, interleave=8)
    plan = make_plan(counts, t, seed=1, blocks=8)
    assert _check_lead_windows(plan, counts, 8, False) == [4]  # every worker's
    assert _check_lead_windows(
        make_plan(counts[:5], t, seed=1, blocks=8), counts[:5], 8, False
    ) == [0]


@SETTINGS
@given(
    counts=st.lists(st.integers(0, 3000), min_size=1, max_size=40),
    t=topo_st,
    blocks=st.integers(2, 9),
    even=even_st,
    seed=st.integers(0, 3),
)
def test_only_a_workers_first_head_window_is_split(
    counts: list[int], t: Topology, blocks: int, even: bool, seed: int
) -> None:
    """Every worker's windows are those of the window groups without a lead window, but
    for its first head window, read as a lead window and the rest of its heads; also after
    an elastic resume, where a worker's first window may hold rests only (not split)."""
    plan = plan_or_none(counts, t, seed=seed, blocks=blocks, even_blocks=even)
    if plan is None:
        return
    other = Topology(t.world_size, t.num_workers + 1, t.batch_size, t.drop_last, t.interleave)
    plans = [plan, plan.resume(plan.batches_per_rank // 2, other)]
    for p in plans:
        _check_lead_windows(p, counts, blocks, even)


def _check_lead_windows(plan: Plan, counts: list[int], blocks: int, even: bool) -> list[int]:
    """Checks the lead windows of ``plan``'s workers; how many it found, in a list."""
    t, led = plan.topology, [0]
    for rank in range(t.world_size):
        for w in range(t.num_workers):
            wp = plan.worker(rank, w)
            windows = wp.windows()
            if not windows:
                continue
            unled = [
                x
                for g in _groups(wp)
                for x in block_windows(g, Blocks(np.asarray(counts), blocks, even))
            ]
            if len(windows) == len(unled):
                assert _keys(windows) == _keys(unled)
                continue
            assert len(windows) == len(unled) + 1 and _keys(windows[2:]) == _keys(unled[1:])
            lead, rest = windows[0], windows[1]
            assert _keys([lead + rest]) == _keys(unled[:1]) and len(lead) >= 2 and rest
            bounds = [Blocks(np.asarray(counts), blocks, even).bounds(s.unit) for s in lead]
            assert all(s.size and max(s.positions()) < b[1] for s, b in zip(lead, bounds))
            assert sum(s.size for s in lead[:-1]) < t.batch_size or len(lead) == 2
            assert sum(s.size for s in lead) >= t.batch_size or len(lead) == 2
            assert sum(s.size for s in lead) <= sum(s.size for s in wp.segments) // LEAD_SHARE
            led[0] += 1
    return led


def _keys(windows: list[list[Segment]]) -> list[list[tuple[int, ...]]]:
    return [[(s.unit, *s.positions().tolist()) for s in w] for w in windows]


def _groups(wp: Any) -> list[list[Segment]]:
    """A worker's window groups (its windows without blocks)."""
    k, n = wp.topology.interleave, len(wp.segments)
    count = -(-n // k)
    bounds = [i * n // count for i in range(count + 1)]
    return [wp.segments[a:b] for a, b in zip(bounds, bounds[1:])]
