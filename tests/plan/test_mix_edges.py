"""Mixed plans on the inputs real users have (plan/mix.py, plan/deal.py, plan/canonical.py):
sources smaller than the (rank, worker) slots, one-unit sources, units of 1 and 10^6 rows,
weights of 0.999/0.001, many sources, sources that wrap around several times, resume at
every step and onto other topologies twice, canonical workers with random batches, and
the bad arguments a user can give."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, event, given, settings
from hypothesis import strategies as st

from shardwise.errors import ConfigError, PlanError
from shardwise.plan import Topology
from shardwise.plan import mix as mix_module
from shardwise.plan.mix import Mixing, Rule, largest_remainder
from shardwise.plan.plans import Plan, make_plan, source_counts

SETTINGS = settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
# up to 4 x 4 slots: more than most sources below have samples or units
topo_st = st.builds(
    Topology,
    world_size=st.integers(1, 4),
    num_workers=st.integers(1, 4),
    batch_size=st.integers(1, 4),
    drop_last=st.booleans(),
    interleave=st.integers(1, 4),
)
# tiny and one-unit sources, empty units, a 200-row unit among 1-row ones
sources_st = st.lists(
    st.lists(st.sampled_from([0, 1, 1, 2, 3, 7, 30, 200]), min_size=1, max_size=3),
    min_size=1,
    max_size=6,
)
rule_st = st.one_of(
    st.builds(Rule, repeat=st.sampled_from([0.1, 0.5, 1.0, 2.5, 4.0])),
    st.builds(Rule, choose=st.integers(0, 120)),
    st.just(Rule()),
)
weight_st = st.sampled_from([0.001, 0.999, 1.0, 3.0, 0.0])


def _setup(units: list[list[int]]) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
    counts = np.array([c for src in units for c in src], dtype=np.int64)
    bounds = tuple(np.cumsum([0] + [len(s) for s in units]).tolist())
    return counts, bounds, np.repeat(np.arange(len(units)), [len(s) for s in units])


def _rules(data: st.DataObject, n: int, weighted: bool) -> tuple[Rule, ...]:
    return tuple(
        Rule(weight=data.draw(weight_st)) if weighted else data.draw(rule_st) for _ in range(n)
    )


def _ranks(plan: Plan) -> list[list[np.ndarray]]:
    per = [plan.rank_batches(r) for r in range(plan.topology.world_size)]
    assert len({len(p) for p in per}) == 1, "unequal steps per rank"
    return per


def _samples(per: list[list[np.ndarray]], steps: slice = slice(None)) -> Counter[tuple[int, int]]:
    return Counter((int(u), int(r)) for rank in per for b in rank[steps] for u, r in b.tolist())


def _global(plan: Plan) -> list[np.ndarray]:
    per = _ranks(plan)
    return [np.concatenate([p[i] for p in per]) for i in range(plan.batches_per_rank)]


@SETTINGS
@given(
    units=sources_st,
    data=st.data(),
    t=topo_st,
    seed=st.integers(0, 3),
    epoch=st.integers(0, 4),
    weighted=st.booleans(),
    epoch_size=st.one_of(st.none(), st.integers(1, 400)),
    batching=st.sampled_from(["random", "stratified"]),
)
def test_tiny_sources_exact_quotas_determinism_and_resume_at_every_step(
    units: list[list[int]],
    data: st.DataObject,
    t: Topology,
    seed: int,
    epoch: int,
    weighted: bool,
    epoch_size: int | None,
    batching: str,
) -> None:
    counts, bounds, source_of = _setup(units)
    mixing = Mixing(bounds, _rules(data, len(units), weighted), epoch_size, batching)
    try:
        plan = make_plan(counts, t, seed=seed, epoch=epoch, mixing=mixing)
    except PlanError as exc:
        assert "fewer than" in str(exc) or "nothing to mix" in str(exc), exc
        event("too little to plan")
        return
    event("planned")
    per = _ranks(plan)
    got = _samples(per)
    quotas = source_counts(mixing, counts, t)
    assert (
        np.bincount(source_of[[u for u, _ in got.elements()]], minlength=len(units)).tolist()
        == quotas
    )
    sizes = mixing.sizes(counts)
    for s in np.flatnonzero(sizes).tolist():  # every sample m or m + 1 times, as the quota says
        times = Counter(n for (u, _), n in got.items() if source_of[u] == s)
        assert set(times) <= {quotas[s] // sizes[s], quotas[s] // sizes[s] + 1}
    mix_module._STREAMS.clear()  # the same inputs give the same plan, not just the kept stream
    again = make_plan(counts, t, seed=seed, epoch=epoch, mixing=mixing)
    assert all((a == b).all() for x, y in zip(per, _ranks(again)) for a, b in zip(x, y))
    for k in range(
        plan.batches_per_rank + 1
    ):  # every step boundary, the first and the last included
        rest = _ranks(plan.resume(k))
        assert all(len(r) == plan.batches_per_rank - k for r in rest)
        assert all((a == b).all() for x, y in zip(per, rest) for a, b in zip(x[k:], y))


@SETTINGS
@given(
    units=sources_st,
    data=st.data(),
    t=topo_st,
    batching=st.sampled_from(["random", "stratified"]),
    moves=st.lists(st.tuples(topo_st, st.floats(0, 1), st.booleans()), min_size=2, max_size=3),
)
def test_resume_onto_other_topologies_twice_in_a_row(
    units: list[list[int]],
    data: st.DataObject,
    t: Topology,
    batching: str,
    moves: list[tuple[Topology, float, bool]],
) -> None:
    counts, bounds, _ = _setup(units)
    mixing = Mixing(bounds, _rules(data, len(units), False), None, batching)
    try:
        plan = make_plan(counts, t, seed=5, epoch=2, mixing=mixing)
    except PlanError:
        event("too little to plan")
        plan = None
    assume(plan is not None)  # no example of the property
    event("planned")
    whole, consumed, lost_bound, current = (
        _samples(_ranks(plan)),
        Counter[tuple[int, int]](),
        0,
        plan,
    )
    for t2, frac, same in moves:
        per = _ranks(current)
        k = int(frac * current.batches_per_rank)
        consumed += _samples(per, slice(0, k))
        was = current.topology
        to = (
            was
            if same
            else Topology(t2.world_size, t2.num_workers, t2.batch_size, True, t2.interleave)
        )
        try:
            current = current.resume(k, to)
        except PlanError as exc:
            assert "no room" in str(exc), (
                exc
            )  # a stratified source without a place in the new batch
            event("no room after a resume")
            return
        lost_bound += 0 if to == was else to.slots * to.batch_size
        if same:  # the same topology continues exactly
            assert all(
                (a == b).all() for x, y in zip(per, _ranks(current)) for a, b in zip(x[k:], y)
            )
    done = consumed + _samples(_ranks(current))
    assert done <= whole  # nothing consumed twice, nothing invented
    if batching == "random":  # each recut leaves out less than one round of its topology
        assert (whole - done).total() < max(lost_bound, 1)


def _divisor_topologies(c: int, g: int) -> list[tuple[int, int]]:
    return [
        (n, w) for n in range(1, c + 1) for w in range(1, c + 1) if c % (n * w) == 0 and g % n == 0
    ]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    units=sources_st,
    data=st.data(),
    c=st.sampled_from([1, 2, 3, 4, 6]),
    per=st.integers(1, 2),
    drop=st.booleans(),
    frac=st.floats(0, 1),
    seed=st.integers(0, 3),
    epoch=st.integers(0, 2),
    interleaves=st.lists(st.integers(1, 4), min_size=3, max_size=3),
)
def test_canonical_random_mixing_same_global_batches_and_resume_chains(
    units: list[list[int]],
    data: st.DataObject,
    c: int,
    per: int,
    drop: bool,
    frac: float,
    seed: int,
    epoch: int,
    interleaves: list[int],
) -> None:
    counts, bounds, _ = _setup(units)
    mixing = Mixing(bounds, _rules(data, len(units), data.draw(st.booleans())), None, "random")
    g = c * per
    tops = _divisor_topologies(c, g)

    def plan_on(n: int, w: int, interleave: int = 2, drop_last: bool = drop) -> Any:
        return make_plan(
            counts,
            Topology(n, w, g // n, drop_last, interleave),
            seed=seed,
            epoch=epoch,
            mixing=mixing,
            canonical_workers=c,
        )

    try:
        reference = _global(plan_on(1, 1))
        event("planned")
    except PlanError:
        event("too little to plan")
        for n, w in tops:
            with pytest.raises(PlanError):
                plan_on(n, w)
        return
    for n, w in tops:
        got = _global(plan_on(n, w))
        assert len(got) == len(reference) and all((a == b).all() for a, b in zip(got, reference)), (
            n,
            w,
        )
    # resumes onto other topologies, with another interleave and drop_last too: the same sequence
    current, done = plan_on(*tops[0]), 0
    for (n, w), interleave in zip((tops[-1], tops[len(tops) // 2], tops[0]), interleaves):
        k = int(frac * current.batches_per_rank)
        done += k
        current = current.resume(k, Topology(n, w, g // n, not drop, interleave))
        rest = _global(current)
        assert len(rest) == len(reference) - done
        assert all((a == b).all() for a, b in zip(reference[done:], rest))


def _slot_counts(plan: Plan, source_of: np.ndarray, n: int) -> np.ndarray:
    """Samples of each source in each (rank, worker)'s piece, from its segments (no rows)."""
    t, out = plan.topology, []
    for r in range(t.world_size):
        for w in range(t.num_workers):
            c = np.zeros(n, dtype=np.int64)
            for seg in plan.worker(r, w).segments:  # type: ignore[union-attr]
                c[source_of[seg.unit]] += seg.size
            out.append(c)
    return np.array(out)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
@given(
    n=st.integers(1, 50),
    data=st.data(),
    ws=st.integers(1, 4),
    nw=st.integers(1, 8),
    b=st.sampled_from([1, 3, 32]),
    drop=st.booleans(),
    weighted=st.booleans(),
    epoch_size=st.one_of(st.none(), st.integers(1, 300_000)),
)
def test_many_sources_and_units_of_one_and_a_million_rows_every_epoch(
    n: int,
    data: st.DataObject,
    ws: int,
    nw: int,
    b: int,
    drop: bool,
    weighted: bool,
    epoch_size: int | None,
) -> None:
    units = [
        data.draw(st.lists(st.sampled_from([0, 1, 2, 7, 1000, 10**6]), min_size=1, max_size=3))
        for _ in range(n)
    ]
    counts, bounds, source_of = _setup(units)
    # weights split epoch_size, or all stored samples (then a one-row source of equal weight would
    # be read a million times: too slow for a unit test)
    mixing = Mixing(
        bounds, _rules(data, n, weighted), epoch_size or (300_000 if weighted else None), "random"
    )
    t = Topology(ws, nw, b, drop, 4)
    firsts = set()
    for epoch in range(2):
        try:
            plan = make_plan(counts, t, seed=1, epoch=epoch, mixing=mixing)
        except PlanError:
            event("too little to plan")
            plan = None
        assume(plan is not None)  # no example of the property
        event("planned")
        quotas = np.array(source_counts(mixing, counts, t))
        got = _slot_counts(plan, source_of, n)
        assert got.sum(axis=0).tolist() == quotas.tolist()  # exact quotas in every epoch
        assert len(set(got.sum(axis=1).tolist())) == 1  # equal pieces
        # every worker holds every source's share, to one sample
        assert (got >= quotas // t.slots).all() and (got <= -(-quotas // t.slots)).all()
        # the first samples of worker 0 from units of over 100 rows (a unit of a few rows
        # may well start with the same row in two epochs)
        head = [seg for seg in plan.worker(0, 0).segments if counts[seg.unit] > 100][:8]  # type: ignore[union-attr]
        firsts.add(tuple((seg.unit, int(plan.row_perm(seg.unit)[seg.lo])) for seg in head))  # type: ignore[union-attr]
    if sum(len(h) for h in firsts) and counts.max() > 100:
        assert len(firsts) > 1  # epochs differ


def test_a_small_source_wraps_around_and_every_sample_comes_once_before_twice() -> None:
    counts = np.array([1, 1, 1, 5000, 5000])  # three one-row units against two large ones
    mixing = Mixing((0, 3, 5), (Rule(weight=0.3), Rule(weight=0.7)), epoch_size=10_000)
    t = Topology(3, 2, 5)  # 30 per round: 10,000 rounds down to 9,990
    for epoch in range(2):
        plan = make_plan(counts, t, seed=3, epoch=epoch, mixing=mixing)
        got = _samples(_ranks(plan))
        small = [got[(u, 0)] for u in range(3)]
        assert sum(small) == source_counts(mixing, counts, t)[0] == 2997
        assert set(small) == {999}  # 2,997 = 999 passes over three samples
        assert (
            max(n for (u, _), n in got.items() if u >= 3) == 1
        )  # the large source: each sample once


def test_bad_rules_are_config_errors_naming_the_problem() -> None:
    for kwargs, match in (
        ({"weight": "0.5"}, "weight= must be a number"),
        ({"repeat": True}, "repeat= must be"),
        ({"choose": 2.5}, "choose= must be a whole number"),
        ({"weight": float("nan")}, "finite"),
        ({"weight": -0.1}, ">= 0"),
        ({"choose": 10**20}, "2\\*\\*62"),
        ({"repeat": float("inf")}, "finite"),
    ):
        with pytest.raises(ConfigError, match=match):
            Rule(**kwargs)
    for epoch_size in (0, 2.5, 2**63, True):
        with pytest.raises(ConfigError, match="epoch_size"):
            Mixing((0, 1), (Rule(),), epoch_size)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="too many"):
        Mixing((0, 1), (Rule(repeat=1e15),)).quotas(np.array([10**6]))
    with pytest.raises(
        PlanError, match="read 333333333333333 times"
    ):  # not a MemoryError or a hang
        make_plan([3], Topology(1), mixing=Mixing((0, 1), (Rule(choose=10**15),)))
    with pytest.raises(PlanError, match="nothing to mix"):
        Mixing((0, 1, 2), (Rule(weight=1), Rule(weight=1)), epoch_size=10).quotas(np.array([0, 0]))
    with pytest.raises(PlanError, match="fewer than"):
        make_plan([0, 0], Topology(1), mixing=Mixing((0, 1, 2), (Rule(weight=1), Rule(weight=1))))
    with pytest.raises(PlanError, match="seed and epoch must be >= 0"):
        make_plan([5, 5], Topology(1), seed=-1)


def test_quotas_are_exact_for_decimal_repeats_and_huge_weights() -> None:
    # floor(100 * 0.57) is 57; the binary product 56.99999999999999 gave 56
    for size, repeat, want in ((100, 0.57, 57), (100, 0.29, 29), (1000, 2.01, 2010), (3, 1 / 3, 1)):
        assert Mixing((0, 1), (Rule(repeat=repeat),)).quotas(np.array([size])).tolist() == [want]
    # weights whose sum overflows a float still split the epoch exactly
    assert largest_remainder(10, [1e308, 1e308]).tolist() == [5, 5]
    assert largest_remainder(10, [1e308, 1e308, 0.0]).tolist() == [5, 5, 0]
    assert largest_remainder(7, [0.999, 0.001]).tolist() == [7, 0]


def test_canonical_stratified_shares_carry_their_rounding_over_cells() -> None:
    # a global batch of 10 on C=2: cells of 5 samples hold 0.5 of the 0.1 weight, so half the
    # cells have one of it (before, every cell was split 4 + 0 + 1 and the weight vanished);
    # the plan and its counts agree on it, as the README says
    counts, bounds, source_of = _setup([[300, 400], [5], [130]])
    mixing = Mixing(
        bounds, (Rule(weight=0.7), Rule(weight=0.1), Rule(weight=0.2)), 1000, "stratified"
    )
    for c, want in ((None, [700, 100, 200]), (2, [700, 100, 200])):
        t = Topology(1, 1, 10)
        plan = make_plan(counts, t, seed=1, mixing=mixing, canonical_workers=c)
        got = _samples(_ranks(plan))
        assert source_counts(mixing, counts, t, canonical_workers=c) == want
        assert np.bincount(source_of[[u for u, _ in got.elements()]], minlength=3).tolist() == want
