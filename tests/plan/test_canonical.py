"""Canonical workers (plan/canonical.py): the same global batches on every topology whose
ranks x workers divide C, locality, and resume onto another topology."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import Plan, make_plan

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _global(plan: Plan) -> list[np.ndarray]:
    n = plan.topology.world_size
    per_rank = [plan.rank_batches(r) for r in range(n)]
    assert len({len(b) for b in per_rank}) == 1
    return [
        np.concatenate([per_rank[r][i] for r in range(n)]) for i in range(plan.batches_per_rank)
    ]


def _divisor_topologies(c: int, g: int) -> list[tuple[int, int]]:
    return [
        (n, w) for n in range(1, c + 1) for w in range(1, c + 1) if c % (n * w) == 0 and g % n == 0
    ]


@SETTINGS
@given(
    c=st.sampled_from([1, 2, 4, 6]),
    per=st.integers(1, 2),
    counts=st.lists(st.integers(0, 60), min_size=1, max_size=25),
    seed=st.integers(0, 9),
    stratified=st.booleans(),
    drop=st.booleans(),
)
def test_same_global_batches_on_every_divisor_topology(
    c: int, per: int, counts: list[int], seed: int, stratified: bool, drop: bool
) -> None:
    g = c * per * 2  # the global batch
    mixing = None
    if stratified and len(counts) > 1:
        mixing = Mixing(
            (0, 1, len(counts)), (Rule(weight=1), Rule(weight=3)), batching="stratified"
        )
    seqs = set()
    for n, w in _divisor_topologies(c, g):
        try:
            plan = make_plan(
                counts,
                Topology(n, w, g // n, drop, 2),
                seed=seed,
                mixing=mixing,
                canonical_workers=c,
            )
        except PlanError:
            seqs.add(b"error")
            continue
        seqs.add(np.concatenate(_global(plan) or [np.empty((0, 2), dtype=np.int64)]).tobytes())
    assert len(seqs) == 1


def test_locality_a_worker_reads_only_its_cells() -> None:
    counts = np.full(256, 20)
    c, g = 8, 32
    grid = make_plan(counts, Topology(1, 1, g), canonical_workers=c, seed=1).inner  # type: ignore[union-attr]
    cell_units = {cell: set(grid.slot_worker(cell).units()) for cell in range(c * c)}
    for n, w in ((1, 1), (2, 2), (4, 2), (1, 8), (8, 1)):
        plan = make_plan(counts, Topology(n, w, g // n), canonical_workers=c, seed=1)
        for r in range(n):
            for k in range(w):
                mine = set(plan.worker(r, k).units())
                cells = [
                    kk * c + cc
                    for kk in range(r * c // n, (r + 1) * c // n)
                    for cc in range(c)
                    if cc % w == k
                ]
                assert mine <= set().union(*(cell_units[x] for x in cells))


@SETTINGS
@given(
    counts=st.lists(st.integers(1, 80), min_size=4, max_size=20),
    frac=st.floats(0, 1),
    moves=st.lists(
        st.sampled_from([(4, 1), (2, 2), (1, 4), (2, 1), (1, 1)]), min_size=1, max_size=3
    ),
)
def test_resume_onto_other_topologies_continues_the_global_sequence(
    counts: list[int], frac: float, moves: list[tuple[int, int]]
) -> None:
    c, g = 4, 8
    try:
        plan = make_plan(counts, Topology(4, 1, 2), seed=3, canonical_workers=c)
    except PlanError:
        return
    reference = _global(plan)
    done, current = 0, plan
    for n, w in moves:
        k = int(frac * current.batches_per_rank)
        done += k
        current = current.resume(k, Topology(n, w, g // n))
        rest = _global(current)
        assert len(rest) == len(reference) - done
        assert all((a == b).all() for a, b in zip(reference[done:], rest))


def test_canonical_errors_are_clear() -> None:
    with pytest.raises(PlanError, match="multiple of world_size"):
        make_plan([100] * 8, Topology(3, 1, 4), canonical_workers=4)
    with pytest.raises(PlanError, match="divide the global batch"):
        make_plan([100] * 8, Topology(2, 1, 3), canonical_workers=4)
    plan = make_plan([100] * 8, Topology(2, 1, 4), canonical_workers=4)
    with pytest.raises(PlanError, match="keeps the global batch"):
        plan.resume(1, Topology(2, 1, 8))
