"""Mixing sources (plan/mix.py, random batches): exact quotas, upsampling, downsampling,
wrap-around, equal steps and resume, as properties over random sources and topologies."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from shardwise.errors import ConfigError, PlanError
from shardwise.plan import Topology
from shardwise.plan.mix import Mixing, Rule, largest_remainder
from shardwise.plan.plans import make_plan, source_counts

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
topo_st = st.builds(
    Topology,
    world_size=st.integers(1, 3),
    num_workers=st.integers(1, 3),
    batch_size=st.integers(1, 6),
    drop_last=st.booleans(),
    interleave=st.integers(1, 4),
)
# each source: its units' counts (empty sources and a source smaller than one batch included)
sources_st = st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=5), min_size=1, max_size=4)
rule_st = st.one_of(
    st.builds(Rule, repeat=st.sampled_from([0.25, 0.5, 1.0, 1.5, 2.0, 3.0])),
    st.builds(Rule, choose=st.integers(0, 80)),
    st.just(Rule()),
)


def _setup(units: list[list[int]]) -> tuple[np.ndarray, tuple[int, ...], np.ndarray]:
    counts = np.array([c for src in units for c in src], dtype=np.int64)
    bounds = tuple(np.cumsum([0] + [len(s) for s in units]).tolist())
    source_of = np.repeat(np.arange(len(units)), [len(s) for s in units])
    return counts, bounds, source_of


def _samples(plan: object) -> list[tuple[int, int]]:
    t = plan.topology  # type: ignore[attr-defined]
    return [tuple(x) for r in range(t.world_size) for b in plan.rank_batches(r) for x in b.tolist()]  # type: ignore[attr-defined]


@given(total=st.integers(0, 10_000), weights=st.lists(st.floats(0, 100), min_size=1, max_size=8))
@settings(max_examples=200, deadline=None)
def test_largest_remainder_is_exact_and_fair(total: int, weights: list[float]) -> None:
    assume(sum(weights) > 0)
    q = largest_remainder(total, weights)
    assert q.sum() == total
    exact = np.array(weights) / sum(weights) * total
    assert (q >= np.floor(exact) - 1e-9).all() and (q <= np.ceil(exact) + 1e-9).all()
    assert q.tolist() == largest_remainder(total, weights).tolist()


@SETTINGS
@given(units=sources_st, data=st.data(), t=topo_st, seed=st.integers(0, 5), epoch=st.integers(0, 5))
def test_random_mix_meets_quotas_exactly(
    units: list[list[int]], data: st.DataObject, t: Topology, seed: int, epoch: int
) -> None:
    counts, bounds, source_of = _setup(units)
    rules = tuple(data.draw(rule_st) for _ in units)
    mixing = Mixing(bounds, rules)
    try:
        plan = make_plan(counts, t, seed=seed, epoch=epoch, mixing=mixing)
    except PlanError:
        assert mixing.quotas(counts).sum() < t.slots * t.batch_size or (
            not t.drop_last and counts.sum() == 0
        )
        return
    quotas = source_counts(mixing, counts, t)
    samples = _samples(plan)
    per_rank = {len(plan.rank_batches(r)) for r in range(t.world_size)}
    assert len(per_rank) == 1  # equal steps
    got = np.bincount(source_of[[u for u, _ in samples]], minlength=len(units))
    assert got.tolist() == quotas  # exact integer quotas, after their rounding
    # the rounding to whole rounds of the topology's batches is what the plan reports
    assert (plan.num_left_out, plan.num_padded) == mixing.rounding(counts, t)
    assert len(samples) + plan.num_left_out - plan.num_padded == mixing.quotas(counts).sum()
    sizes = mixing.sizes(counts)
    for s in range(len(units)):
        mine = Counter(x for x in samples if source_of[x[0]] == s)
        if not quotas[s]:
            continue
        assert set(mine) <= {
            (u, r) for u in range(bounds[s], bounds[s + 1]) for r in range(counts[u])
        }
        # every sample once before any twice: multiplicities differ by at most one
        lo = quotas[s] // sizes[s]
        assert all(lo <= m <= lo + 1 for m in mine.values())
        assert len(mine) == (sizes[s] if quotas[s] >= sizes[s] else quotas[s])


def test_weights_give_the_epoch_size_in_proportion() -> None:
    counts = np.array([500, 500, 300, 40])
    mixing = Mixing((0, 2, 3, 4), (Rule(weight=5), Rule(weight=3), Rule(weight=2)), epoch_size=1000)
    assert mixing.quotas(counts).tolist() == [
        500,
        300,
        200,
    ]  # the small source wraps around 5 times
    assert source_counts(mixing, counts, Topology(3, 1, 7)) == [494, 296, 197]  # 987 = 47 * 21
    with pytest.raises(ConfigError, match="weight= to every source or to none"):
        Mixing((0, 1, 2), (Rule(weight=1), Rule(repeat=2)))
    with pytest.raises(ConfigError, match="at most one"):
        Rule(weight=1, choose=3)
    with pytest.raises(ConfigError, match="batching"):
        Mixing((0, 1), (Rule(),), batching="sorted")


@pytest.mark.parametrize("batching", ["random", "stratified"])
@pytest.mark.parametrize("drop_last", [True, False])
@pytest.mark.parametrize("canonical", [None, 4])
def test_the_quotas_rounding_is_reported_as_left_out_or_padded(
    batching: str, drop_last: bool, canonical: int | None
) -> None:
    """1,000 samples in rounds of 60 (1 rank x 3 workers x 20) or of 80 (the 4 x 4 canonical
    cells of 5): 40 left out (960) in both cases, or 20 padded (1,020) or 40 (1,040), and
    said so."""
    counts = np.array([800, 300, 300])
    rules = (Rule(weight=0.7), Rule(weight=0.1), Rule(weight=0.2))
    mixing = Mixing((0, 1, 2, 3), rules, epoch_size=1000, batching=batching)
    t = Topology(1, 3, 20, drop_last) if canonical is None else Topology(4, 1, 5, drop_last)
    plan = make_plan(counts, t, mixing=mixing, canonical_workers=canonical)
    yielded = len(_samples(plan))
    padded = 20 if canonical is None else 40
    assert yielded == (960 if drop_last else 1000 + padded)
    assert (plan.num_left_out, plan.num_padded) == ((40, 0) if drop_last else (0, padded))
    assert yielded + plan.num_left_out - plan.num_padded == 1000


def test_downsampling_takes_a_new_subset_each_epoch_and_cycles() -> None:
    counts = np.full(40, 25)  # one source of 1000 samples, 250 per epoch
    mixing = Mixing((0, 40), (Rule(choose=250),))
    t = Topology(1, 1, 10)
    seen: list[set[int]] = []
    for epoch in range(4):
        units = {u for u, _ in _samples(make_plan(counts, t, seed=2, epoch=epoch, mixing=mixing))}
        seen.append(units)
    # 250 samples = 10 whole units each epoch, the next 10 of the cycle: 4 epochs cover all 40
    assert all(len(s) == 10 for s in seen)
    assert set().union(*seen) == set(range(40))


@SETTINGS
@given(units=sources_st, t=topo_st, t2=topo_st, frac=st.floats(0, 1), data=st.data())
def test_mixed_resume_same_and_other_topology(
    units: list[list[int]], t: Topology, t2: Topology, frac: float, data: st.DataObject
) -> None:
    counts, bounds, _ = _setup(units)
    mixing = Mixing(bounds, tuple(data.draw(rule_st) for _ in units))
    try:
        plan = make_plan(counts, t, seed=1, epoch=1, mixing=mixing)
    except PlanError:
        plan = None
    assume(plan is not None)  # too little to plan: no example of the property
    k = int(frac * plan.batches_per_rank)
    same = plan.resume(k)
    for r in range(t.world_size):
        assert all((a == b).all() for a, b in zip(plan.rank_batches(r)[k:], same.rank_batches(r)))
    before = [
        tuple(x) for r in range(t.world_size) for b in plan.rank_batches(r)[:k] for x in b.tolist()
    ]
    t2 = Topology(t2.world_size, t2.num_workers, t2.batch_size, True, t2.interleave)
    after = _samples(plan.resume(k, t2))
    # nothing consumed is repeated beyond what the plan holds; nothing is invented
    assert Counter(before) + Counter(after) <= Counter(_samples(plan))


def _worker_sources(plan: Any, source_of: np.ndarray) -> list[np.ndarray]:
    """The source of each sample each (rank, worker) yields, in order."""
    t = plan.topology
    return [
        source_of[plan.worker(r, w).pairs()[:, 0]]
        for r in range(t.world_size)
        for w in range(t.num_workers)
    ]


@SETTINGS
@given(units=sources_st, data=st.data(), t=topo_st, seed=st.integers(0, 5), epoch=st.integers(0, 5))
def test_random_mix_deals_every_source_to_every_worker_in_proportion(
    units: list[list[int]], data: st.DataObject, t: Topology, seed: int, epoch: int
) -> None:
    counts, bounds, source_of = _setup(units)
    mixing = Mixing(bounds, tuple(data.draw(rule_st) for _ in units))
    try:
        plan = make_plan(counts, t, seed=seed, epoch=epoch, mixing=mixing)
    except PlanError:
        plan = None
    assume(plan is not None)  # too little to plan: no example of the property
    quotas = np.array(source_counts(mixing, counts, t))
    per_worker = np.array(
        [np.bincount(s, minlength=len(units)) for s in _worker_sources(plan, source_of)]
    )
    # a DataLoader batch comes from one worker: each worker holds every source's share, to one
    # sample
    assert (per_worker >= quotas // t.slots).all() and (per_worker <= -(-quotas // t.slots)).all()
    assert per_worker.sum(axis=0).tolist() == quotas.tolist()


def test_random_mix_batches_of_each_worker_have_the_sources_shares() -> None:
    # units of uneven sizes (as row groups of files of uneven lengths are): dealing whole units
    # by size gave one DataLoader worker 16% of the third source and the other 24%
    sizes = [
        [10_000] * 15,
        [10_000] * 3 + [3_334] + [10_000] * 3 + [3_333] * 2 + [10_000] * 3,
        [6_667, 10_000, 6_667, 10_000, 6_666],
    ]
    counts, bounds, source_of = _setup(sizes)
    weights = np.array([0.4, 0.4, 0.2])
    mixing = Mixing(bounds, tuple(Rule(weight=w) for w in weights), epoch_size=300_000)
    t = Topology(1, 2, 256, True, 64)
    for epoch in range(3):
        plan = make_plan(counts, t, seed=0, epoch=epoch, mixing=mixing)
        for src in _worker_sources(plan, source_of):
            assert np.abs(np.bincount(src, minlength=3) / len(src) - weights).max() < 1e-4
            batches = src[: len(src) // 256 * 256].reshape(-1, 256)
            shares = np.stack([(batches == s).mean(axis=1) for s in range(3)], axis=1)
            assert (
                np.abs(shares - weights).mean() < 0.005
            )  # each batch a stratified sample of its worker
