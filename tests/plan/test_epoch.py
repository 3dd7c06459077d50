"""Property tests of the epoch plan's contracts (plan/epoch.py; pure numpy, no I/O)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from _plans import plan_or_none, topologies
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import EpochPlan, Topology
from shardwise.plan.topology import Resume

counts_st = st.one_of(
    st.lists(st.integers(0, 60), min_size=1, max_size=40),  # includes empty units
    st.lists(st.integers(0, 5), min_size=1, max_size=3).map(lambda c: c + [900]),  # one giant unit
    st.lists(st.integers(1, 30), min_size=1, max_size=3),  # fewer units than workers
)
topo_st = topologies(5, 4)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _all_samples(plan: EpochPlan) -> list[tuple[int, int]]:
    return [
        tuple(x)
        for r in range(plan.topology.world_size)
        for b in plan.rank_batches(r)
        for x in b.tolist()
    ]


def _epoch_order(plan: EpochPlan) -> list[tuple[int, int]]:
    """The epoch's sample order before cutting: units permuted, rows permuted."""
    out: list[tuple[int, int]] = []
    for seg in plan.stream.segments:
        perm = plan.row_perm(seg.unit)
        out.extend((seg.unit, int(r)) for r in perm[seg.positions()])
    return out


@SETTINGS
@given(counts=counts_st, t=topo_st, seed=st.integers(0, 3), epoch=st.integers(0, 3))
def test_equal_exact_and_no_repeats(counts: list[int], t: Topology, seed: int, epoch: int) -> None:
    plan = plan_or_none(counts, t, seed=seed, epoch=epoch)
    if plan is None:
        return
    n = sum(counts)
    per_rank = [plan.rank_batches(r) for r in range(t.world_size)]
    assert len({len(b) for b in per_rank}) == 1  # same number of batches on every rank
    assert all(len(b) == t.batch_size for batches in per_rank for b in batches)
    samples = _all_samples(plan)
    valid = {(u, r) for u, c in enumerate(counts) for r in range(c)}
    assert set(samples) <= valid
    if t.drop_last:
        assert len(samples) == len(set(samples))
        assert n - len(samples) == plan.num_left_out <= t.slots * t.batch_size - 1
    else:
        assert set(samples) == valid
        assert len(samples) - n == plan.num_padded < t.slots * t.batch_size
        extra = Counter(samples) - Counter(valid)
        order = _epoch_order(plan)
        start = Counter(order[i % n] for i in range(plan.num_padded))
        assert extra == start  # padding repeats the start of the epoch's order, only that


@SETTINGS
@given(counts=counts_st, t=topo_st, seed=st.integers(0, 3))
def test_deterministic_and_new_order_each_epoch(counts: list[int], t: Topology, seed: int) -> None:
    plan = plan_or_none(counts, t, seed=seed, epoch=0)
    if plan is None:
        return
    again = EpochPlan(counts, t, seed=seed, epoch=0)
    assert _all_samples(plan) == _all_samples(again)
    if sum(counts) >= 20 and len([c for c in counts if c]) >= 2:
        orders = {tuple(_epoch_order(EpochPlan(counts, t, seed=seed, epoch=e))) for e in range(4)}
        assert len(orders) > 1


@SETTINGS
@given(
    counts=st.lists(st.integers(1, 40), min_size=4, max_size=40), t=topo_st, epoch=st.integers(0, 5)
)
def test_locality_each_unit_read_by_at_most_two_workers(
    counts: list[int], t: Topology, epoch: int
) -> None:
    # padding (drop_last=False) re-reads the first units once more; the rest is local
    t = Topology(t.world_size, t.num_workers, t.batch_size, True, t.interleave)
    plan = plan_or_none(counts, t, epoch=epoch)
    if plan is None:
        return
    assume(max(counts) <= plan.samples_per_worker)
    readers: dict[int, set[int]] = {}
    for r in range(t.world_size):
        for w in range(t.num_workers):
            for u in plan.worker(r, w).units():
                readers.setdefault(u, set()).add(r * t.num_workers + w)
    assert max(len(s) for s in readers.values()) <= 2


def _consumed(plan: EpochPlan, k: int) -> list[tuple[int, int]]:
    return [
        tuple(x)
        for r in range(plan.topology.world_size)
        for b in plan.rank_batches(r)[:k]
        for x in b.tolist()
    ]


@SETTINGS
@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=30),
    t=topo_st,
    frac=st.floats(0, 1),
    seed=st.integers(0, 2),
)
def test_same_topology_resume_continues_exactly(
    counts: list[int], t: Topology, frac: float, seed: int
) -> None:
    plan = plan_or_none(counts, t, seed=seed, epoch=1)
    if plan is None:
        return
    k = int(frac * plan.batches_per_rank)  # start, middle and end of the epoch
    resumed = plan.resume(k)
    assert resumed.batches_per_rank == plan.batches_per_rank - k
    for r in range(t.world_size):
        full = plan.rank_batches(r)
        rest = resumed.rank_batches(r)
        assert len(rest) == len(full) - k
        assert all((a == b).all() for a, b in zip(full[k:], rest))
    # resuming twice composes
    if resumed.batches_per_rank:
        j = resumed.batches_per_rank // 2
        twice = resumed.resume(j)
        assert all(
            (a == b).all() for a, b in zip(plan.rank_batches(0)[k + j :], twice.rank_batches(0))
        )


@SETTINGS
@given(
    counts=st.lists(st.integers(0, 50), min_size=1, max_size=30),
    t=topo_st,
    t2=topo_st,
    frac=st.floats(0, 1),
)
def test_elastic_resume_never_repeats_or_invents(
    counts: list[int], t: Topology, t2: Topology, frac: float
) -> None:
    t2 = Topology(t2.world_size, t2.num_workers, t2.batch_size, t.drop_last, t2.interleave)
    assume(t2 != t)
    plan = plan_or_none(counts, t, seed=5, epoch=2)
    if plan is None:
        return
    k = int(frac * plan.batches_per_rank)
    before = _consumed(plan, k)
    planned = _all_samples(plan)
    remaining_n = len(planned) - len(before)
    after_plan = plan.resume(k, t2)
    after = _all_samples(after_plan)
    per_rank = {len(after_plan.rank_batches(r)) for r in range(t2.world_size)}
    assert len(per_rank) == 1
    if t.drop_last:
        combined = before + after
        assert len(combined) == len(set(combined))  # nothing consumed twice
        assert set(after) <= set(planned) - set(before)
        assert remaining_n - len(after) == after_plan.num_left_out < t2.slots * t2.batch_size
    else:  # every sample not delivered yet, once, and only the new topology's padding
        left = set(planned) - set(before)
        assert set(after) == left  # none lost, none delivered before (the old padding's too)
        assert len(after) - len(left) == after_plan.num_padded < t2.slots * t2.batch_size


def test_errors_are_clear() -> None:
    with pytest.raises(PlanError, match="no samples"):
        EpochPlan([0, 0], Topology(2))
    with pytest.raises(PlanError, match="fewer than"):
        EpochPlan([3], Topology(2, 2, 4))
    with pytest.raises(PlanError, match="world_size must be at least 1"):
        Topology(0)
    for bad in (2.5, True, "2"):  # never cut to a whole number (2.5 was 2) nor a TypeError
        with pytest.raises(PlanError, match="batch_size must be an integer"):
            Topology(1, 1, bad)  # type: ignore[arg-type]
    plan = EpochPlan([10, 10], Topology(2, 1, 2))
    with pytest.raises(PlanError):
        plan.resume(plan.batches_per_rank + 1)
    with pytest.raises(PlanError, match="outside"):
        plan.worker(2, 0)


def test_plan_is_small_for_large_inputs() -> None:
    counts = np.full(100_000, 1_000, dtype=np.int64)  # 100 million samples
    plan = EpochPlan(counts, Topology(64, 8, 32), seed=1)
    wp = plan.worker(63, 7)
    assert wp.num_samples == plan.samples_per_worker
    assert len(wp.segments) <= counts.size // (64 * 8) + 2
    assert plan.samples_per_rank * 64 + plan.num_left_out == 100_000_000


@pytest.mark.parametrize("n", [-5, 1.5, True, "3"])
def test_a_saved_resume_of_no_whole_count_of_batches_is_refused(n: object) -> None:
    """``state_dict`` refuses such a count; a state edited or written by hand must too."""
    saved = Resume(Topology(2, 1, 4, True), 3).to_dict()
    with pytest.raises(PlanError, match="consumed_batches must be a whole number"):
        Resume.from_dict({**saved, "consumed_batches": n})
    assert Resume.from_dict(saved) == Resume(Topology(2, 1, 4, True), 3)
