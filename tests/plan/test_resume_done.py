"""Resuming from the batches each slot delivered (``Resume.done``), the position of a pass
whose ranks did not take their batches in lockstep (HF Accelerate's dispatcher draws every
rank's pieces from rank 0's DataLoader): the rest is planned again on any topology, with
nothing delivered twice and nothing lost but the new cut's tail."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from _plans import plan_or_none, topologies
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import make_plan
from shardwise.plan.topology import Resume

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
topo_st = topologies(4, 3)
Pair = tuple[int, int]


def _pieces(plan: object) -> list[list[Pair]]:
    """Each slot's whole piece, in order."""
    t = plan.topology  # type: ignore[attr-defined]
    return [
        [tuple(x) for x in plan.worker(r, w).pairs().tolist()]  # type: ignore[attr-defined]
        for r in range(t.world_size)
        for w in range(t.num_workers)
    ]


def _everything(plan: object) -> list[Pair]:
    return [p for piece in _pieces(plan) for p in piece]


def _done(plan: object, fracs: list[float]) -> tuple[int, ...]:
    t = plan.topology  # type: ignore[attr-defined]
    per = plan.samples_per_worker // t.batch_size  # type: ignore[attr-defined]
    return tuple(int(fracs[s % len(fracs)] * per) for s in range(t.slots))


@SETTINGS
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=25),
    t=topo_st,
    t2=topo_st,
    fracs=st.lists(st.floats(0, 1), min_size=1, max_size=12),
)
def test_the_rest_after_each_slots_own_count_is_planned_once_on_any_topology(
    counts: list[int], t: Topology, t2: Topology, fracs: list[float]
) -> None:
    t2 = Topology(t2.world_size, t2.num_workers, t2.batch_size, t.drop_last, t2.interleave)
    plan = plan_or_none(counts, t, seed=3, epoch=1)
    assume(plan is not None)
    done = _done(plan, fracs)
    before = [p for piece, d in zip(_pieces(plan), done) for p in piece[: d * t.batch_size]]
    left = Counter(_everything(plan)) - Counter(before)
    after_plan = make_plan(counts, t2, seed=3, epoch=1, resumes=[Resume(t, 0, done)])
    after = Counter(_everything(after_plan))
    assert len({after_plan.batches_per_rank}) == 1
    if t.drop_last:
        assert not (after - left), "a sample delivered before, or twice, or invented"
        lost = sum((left - after).values())
        assert lost == after_plan.num_left_out < t2.slots * t2.batch_size
    else:  # every sample not delivered yet (the old padding's copies of delivered ones
        assert set(after) == set(_everything(plan)) - set(before)  # are not), once besides
        assert sum(after.values()) - len(after) == after_plan.num_padded  # the new padding


@SETTINGS
@given(t=topo_st, fracs=st.lists(st.floats(0, 1), min_size=1, max_size=6))
def test_stratified_batches_resume_from_each_slots_count(t: Topology, fracs: list[float]) -> None:
    counts = np.array([30, 12, 25, 7, 40], dtype=np.int64)
    mixing = Mixing((0, 2, 5), (Rule(weight=1.0), Rule(weight=2.0)), batching="stratified")
    t = Topology(t.world_size, t.num_workers, t.batch_size, True, t.interleave)
    try:
        plan = make_plan(counts, t, seed=2, mixing=mixing)
    except PlanError:
        return
    done = _done(plan, fracs)
    before = Counter(p for piece, d in zip(_pieces(plan), done) for p in piece[: d * t.batch_size])
    t2 = Topology(max(1, t.world_size - 1), t.num_workers + 1, t.batch_size, True, t.interleave)
    after = make_plan(counts, t2, seed=2, mixing=mixing, resumes=[Resume(t, 0, done)])
    total = Counter(_everything(plan))
    assert not ((before + Counter(_everything(after))) - total), "a sample delivered twice"


def test_a_saved_count_per_slot_round_trips_and_is_checked() -> None:
    t = Topology(2, 2, 4)
    saved = Resume(t, 0, (1, 0, 3, 2)).to_dict()
    assert Resume.from_dict(saved) == Resume(t, 0, (1, 0, 3, 2))
    assert "done" not in Resume(t, 3).to_dict()
    for bad in ([1, 2, 3], [1, -1, 0, 0], [1, 2.5, 0, 0], "1234"):
        with pytest.raises(PlanError, match="done must list 4 whole numbers"):
            Resume.from_dict({**saved, "done": bad})
    plan = make_plan([40, 40], t, seed=0)
    with pytest.raises(PlanError, match="a worker delivered 99 batches"):
        make_plan([40, 40], Topology(1), seed=0, resumes=[Resume(t, 0, (99, 0, 0, 0))])
    assert plan.batches_per_rank > 0


def test_canonical_workers_refuse_a_count_per_slot_by_name() -> None:
    t = Topology(2, 1, 4)
    with pytest.raises(PlanError, match="canonical_workers continues an epoch from its global"):
        make_plan([40, 40], t, seed=0, canonical_workers=2, resumes=[Resume(t, 0, (1, 2))])
