"""Elastic resumes of a padded mixed epoch (plan/padcopies.py): a mixed source its quota
wraps around is in the epoch more than once, and after any chain of resumes onto other
topologies the epoch still delivers its exact multiset, plus the padding copies only."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import Plan, make_plan

Key = tuple[int, int]
# the units of the tester's data: five Parquet files' row groups, then one JSONL file
TRIED = [50] * 5 + [18] + [40] * 8 + [18] + [58] * 4 + [52] + [58] * 6 + [47]
TRIED += [63] * 4 + [34] + [700]


def _delivered(plan: Plan, batches: int | None = None) -> Counter[Key]:
    """The samples of every rank's first ``batches`` batches (None: all), counted."""
    out: Counter[Key] = Counter()
    for r in range(plan.topology.world_size):
        for b in plan.rank_batches(r)[:batches]:
            out.update((int(u), int(x)) for u, x in b.tolist())
    return out


def _epoch(plan: Plan) -> Counter[Key]:
    """The epoch's own samples (its stream before any padding), counted."""
    out: Counter[Key] = Counter()
    for seg in plan.stream.slice(0, plan.stream.size):  # type: ignore[union-attr]
        rows = plan.row_perm(seg.unit)[seg.positions()]  # type: ignore[union-attr]
        out.update((seg.unit, int(x)) for x in rows.tolist())
    return out


def _check_chain(
    units: list[list[int]], repeats: list[float], moves: list[tuple[Topology, int]]
) -> None:
    """Start on ``moves[0]``'s topology, and after ``k`` batches per rank of each move
    resume on the next one's; the last runs to the end of the epoch. Every sample is
    delivered as often as the epoch holds it, and the last resume adds its own padding
    only (the copies of the interrupted topologies that were delivered count as
    deliveries of their sample)."""
    counts = np.array([c for u in units for c in u], dtype=np.int64)
    bounds = tuple(np.cumsum([0, *map(len, units)]).tolist())
    mixing = Mixing(bounds, tuple(Rule(repeat=r) for r in repeats), None, "random")
    plan = make_plan(counts, moves[0][0], seed=5, mixing=mixing)
    epoch, done = _epoch(plan), Counter[Key]()
    for (_, k), (to, _) in zip(moves, moves[1:]):
        k = min(k, plan.batches_per_rank)
        done += _delivered(plan, k)
        plan = plan.resume(k, to)
    rest = _delivered(plan)
    assert not epoch - (done + rest)  # no sample lost, nor delivered too seldom
    assert (rest - (epoch - done)).total() == plan.num_padded  # nor too often
    assert plan.num_padded < plan.topology.slots * plan.topology.batch_size


def _t(world: int, workers: int, batch: int, interleave: int = 64) -> Topology:
    return Topology(world, workers, batch, False, interleave)


@pytest.mark.parametrize(
    "moves",
    [
        [(_t(3, 2, 4, 2), 101), (_t(1, 1, 16), 16), (_t(2, 3, 16, 2), 0)],
        [(_t(2, 3, 5, 2), 98), (_t(4, 3, 5, 2), 43), (_t(4, 1, 4, 2), 0)],
        [(_t(3, 3, 5, 2), 64), (_t(4, 2, 16), 6), (_t(1, 2, 16), 0)],
        [(_t(3, 1, 8, 2), 53), (_t(3, 3, 5, 2), 15), (_t(2, 3, 5, 2), 0)],
    ],
)
def test_the_tried_chains_deliver_every_sample(moves: list[tuple[Topology, int]]) -> None:
    """The tester's chains: the sources' quotas are rounded up to whole global batches,
    so a few samples are in the epoch twice, and after two resumes some of the second
    source's were never delivered: those also at the start of the stream the second
    topology padded from, with both occurrences in the slots holding it or its copies."""
    _check_chain([TRIED[:-1], TRIED[-1:]], [1.0, 1.0], moves)


@pytest.mark.parametrize(
    ("units", "repeats", "moves"),
    [
        # lost samples: a sample twice in the epoch and in the padding, in the same slots
        ([[24, 7]], [2.5], [(_t(2, 3, 2, 3), 5), (_t(2, 1, 5, 1), 4), (_t(3, 2, 6, 1), 0)]),
        (
            [[0, 31, 16], [35]],
            [1.0, 1.0],
            [(_t(2, 3, 3, 2), 2), (_t(3, 3, 5, 2), 2), (_t(3, 3, 3, 2), 0)],
        ),
        # samples delivered too often: a padding copy and its original delivered, the
        # sample's other occurrence in a slot of its own not yet
        ([[7], [4]], [1.0, 1.5], [(_t(2, 1, 5, 4), 0), (_t(3, 1, 5, 2), 1), (_t(1, 3, 4, 3), 0)]),
        (
            [[32, 16, 33, 9], [23]],
            [1.5, 1.0],
            [(_t(1, 1, 4, 1), 0), (_t(3, 2, 6, 3), 7), (_t(1, 1, 1, 1), 0)],
        ),
    ],
)
def test_chains_that_lost_or_repeated_samples(
    units: list[list[int]], repeats: list[float], moves: list[tuple[Topology, int]]
) -> None:
    _check_chain(units, repeats, moves)


topo_st = st.builds(
    Topology,
    world_size=st.integers(1, 3),
    num_workers=st.integers(1, 3),
    batch_size=st.integers(1, 6),
    drop_last=st.just(False),
    interleave=st.integers(1, 4),
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    units=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=4), min_size=1, max_size=3),
    repeats=st.lists(st.sampled_from([0.5, 1.0, 1.5, 2.5]), min_size=3, max_size=3),
    moves=st.lists(st.tuples(topo_st, st.integers(0, 40)), min_size=3, max_size=4),
)
def test_padded_mixed_epochs_resumed_elastically_deliver_their_multiset(
    units: list[list[int]], repeats: list[float], moves: list[tuple[Topology, int]]
) -> None:
    moves = [m for i, m in enumerate(moves) if i == 0 or m[0] != moves[i - 1][0]]
    assume(len(moves) > 1)  # resumes onto other topologies only
    try:
        _check_chain(units, repeats[: len(units)], moves)
    except PlanError as e:  # nothing to plan: the quotas have no sample
        assert "quotas (0 samples)" in str(e)
