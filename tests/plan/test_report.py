"""plan_report: figures computed from the plan alone, checked against the plan itself."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.plan import EpochPlan, Mixing, Rule, Topology, make_plan
from shardwise.plan.report import plan_report


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    counts=st.lists(st.integers(1, 50), min_size=1, max_size=25),
    world=st.integers(1, 4),
    workers=st.integers(1, 3),
    batch=st.integers(1, 4),
    drop=st.booleans(),
    seed=st.integers(0, 9),
)
def test_report_matches_the_plan(
    counts: list[int], world: int, workers: int, batch: int, drop: bool, seed: int
) -> None:
    t = Topology(world, workers, batch, drop, interleave=3)
    if drop and sum(counts) < world * workers * batch:
        return  # no plan for that (its own error is tested elsewhere)
    plan = EpochPlan(counts, t, seed=seed)
    unit_bytes = np.array([100 * c for c in counts])
    r = plan_report(plan, unit_bytes)
    assert r["steps_per_rank"] == len(plan.rank_batches(0)) == plan.batches_per_rank
    assert (
        r["samples_per_rank"] * world == sum(counts) - r["samples_left_out"] + r["samples_padded"]
    )
    # read amplification from the plan's own (unit, row) pairs: units each worker touches
    touched = [
        set(plan.worker(rk, w).pairs()[:, 0].tolist())
        for rk in range(world)
        for w in range(workers)
    ]
    read = sum(int(unit_bytes[sorted(u)].sum()) for u in touched)
    used = set().union(*touched)
    assert r["read_amplification"] == (read / unit_bytes[sorted(used)].sum() if used else 0.0)
    assert r["read_amplification"] >= 1.0
    assert 0 < r["peak_buffered_bytes"] <= 2 * 3 * unit_bytes.max()  # two windows of <= 3 units


def test_one_worker_reading_everything_has_no_amplification() -> None:
    plan = EpochPlan([10, 20, 30], Topology(1, 1, 5, True, interleave=8), seed=0)
    r = plan_report(plan, np.array([1000, 2000, 3000]))
    assert r["read_amplification"] == 1.0 and r["peak_buffered_bytes"] == 6000
    assert r["samples_left_out"] == 0 and r["steps_per_rank"] == 12


def test_report_of_mixed_and_canonical_plans() -> None:
    counts = np.full(40, 30)
    mixing = Mixing((0, 10, 40), (Rule(weight=1), Rule(weight=1)), batching="stratified")
    for plan in (
        make_plan(counts, Topology(2, 2, 6), mixing=mixing, seed=1),
        make_plan(counts, Topology(2, 2, 4), canonical_workers=4, seed=1),
    ):
        report = plan_report(plan, np.full(40, 1000))
        assert report["steps_per_rank"] == plan.batches_per_rank == len(plan.rank_batches(1))
        assert report["read_amplification"] >= 1.0
        assert report["peak_buffered_bytes"] >= 1000
