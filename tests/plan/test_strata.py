"""Stratified batches (plan/strata.py): every batch holds each source's share exactly,
equal steps, and resume on the same and on another topology."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import make_plan, source_counts
from shardwise.plan.strata import StratifiedPlan

SETTINGS = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
topo_st = st.builds(
    Topology,
    world_size=st.integers(1, 3),
    num_workers=st.integers(1, 3),
    batch_size=st.integers(2, 8),
    drop_last=st.booleans(),
    interleave=st.integers(1, 4),
)
sources_st = st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=4), min_size=1, max_size=3)


def _mixing(units: list[list[int]], weights: list[float]) -> tuple[np.ndarray, Mixing, np.ndarray]:
    counts = np.array([c for src in units for c in src], dtype=np.int64)
    bounds = tuple(np.cumsum([0] + [len(s) for s in units]).tolist())
    rules = tuple(Rule(weight=w) for w in weights[: len(units)])
    source_of = np.repeat(np.arange(len(units)), [len(s) for s in units])
    return counts, Mixing(bounds, rules, epoch_size=150, batching="stratified"), source_of


@SETTINGS
@given(
    units=sources_st,
    weights=st.lists(st.floats(0.1, 5), min_size=3, max_size=3),
    t=topo_st,
    epoch=st.integers(0, 3),
)
def test_every_batch_holds_each_share(
    units: list[list[int]], weights: list[float], t: Topology, epoch: int
) -> None:
    counts, mixing, source_of = _mixing(units, weights)
    try:
        plan = make_plan(counts, t, seed=4, epoch=epoch, mixing=mixing)
    except PlanError:
        plan = None
    assume(plan is not None)  # too little to plan: no example of the property
    assert isinstance(plan, StratifiedPlan)
    share = plan.shares(t.batch_size)
    assert share.sum() == t.batch_size
    batches = [plan.rank_batches(r) for r in range(t.world_size)]
    assert len({len(b) for b in batches}) == 1
    total = np.zeros(len(units), dtype=np.int64)
    for b in (b for rank in batches for b in rank):
        got = np.bincount(source_of[b[:, 0]], minlength=len(units))
        assert got.tolist() == share.tolist()  # exact: the same make-up in every batch
        total += got
    assert total.tolist() == source_counts(mixing, counts, t)


@SETTINGS
@given(
    units=sources_st,
    weights=st.lists(st.floats(0.1, 5), min_size=3, max_size=3),
    t=topo_st,
    t2=topo_st,
    frac=st.floats(0, 1),
)
def test_stratified_resume(
    units: list[list[int]], weights: list[float], t: Topology, t2: Topology, frac: float
) -> None:
    counts, mixing, _ = _mixing(units, weights)
    try:
        plan = make_plan(counts, t, seed=2, epoch=1, mixing=mixing)
    except PlanError:
        plan = None
    assume(plan is not None)  # too little to plan: no example of the property
    k = int(frac * plan.batches_per_rank)
    same = plan.resume(k)
    for r in range(t.world_size):
        assert all((a == b).all() for a, b in zip(plan.rank_batches(r)[k:], same.rank_batches(r)))
    before = Counter(
        tuple(x) for r in range(t.world_size) for b in plan.rank_batches(r)[:k] for x in b.tolist()
    )
    planned = Counter(
        tuple(x) for r in range(t.world_size) for b in plan.rank_batches(r) for x in b.tolist()
    )
    try:
        after_plan = plan.resume(
            k, Topology(t2.world_size, t2.num_workers, t2.batch_size, True, t2.interleave)
        )
    except PlanError as e:
        assert "no room" in str(e)
        return
    steps = {len(after_plan.rank_batches(r)) for r in range(t2.world_size)}
    assert len(steps) == 1
    after = Counter(
        tuple(x)
        for r in range(t2.world_size)
        for b in after_plan.rank_batches(r)
        for x in b.tolist()
    )
    assert before + after <= planned  # nothing consumed twice, nothing invented
    if after_plan.batches_per_rank:  # twice resumed: continues exactly
        j = after_plan.batches_per_rank // 2
        again = after_plan.resume(j)
        assert all(
            (a == b).all() for a, b in zip(after_plan.rank_batches(0)[j:], again.rank_batches(0))
        )
