"""Token plans: every token once per epoch but a tail under one global batch, equal
steps, determinism, token-weighted mixing with exact quotas, canonical workers, resume."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.packing import PACKINGS
from shardwise.plan.tokens import TokenPlan
from shardwise.plan.tokenstats import token_stats

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
UNIT = st.lists(
    st.one_of(st.sampled_from([0, 1]), st.integers(0, 30), st.integers(20, 90)), max_size=12
)
TOPOLOGY = st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 3))


def _plan(units: list[list[int]], seq_len: int, t: Topology, **kw: object) -> TokenPlan | None:
    lengths = np.array([n for u in units for n in u], dtype=np.int64)
    try:
        return TokenPlan(lengths, np.array([len(u) for u in units]), seq_len, t, **kw)  # type: ignore[arg-type]
    except PlanError:  # fewer sequences than one global batch
        return None


def _consumed(plan: TokenPlan, batches: int | None = None) -> list[tuple[int, int]]:
    """(unit, sequence) of every rank's first ``batches`` batches, in global order."""
    per_rank = [plan.rank_batches(r) for r in range(plan.topology.world_size)]
    assert len({len(b) for b in per_rank}) == 1  # equal steps
    n = len(per_rank[0]) if batches is None else batches
    return [tuple(p) for i in range(n) for b in per_rank for p in b[i].tolist()]  # type: ignore[misc]


def _tokens(plan: TokenPlan, seqs: list[tuple[int, int]]) -> np.ndarray:
    """How often each token of the data is in ``seqs``."""
    seen = np.zeros(int(plan.lengths.sum()), dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(plan.lengths)])
    for unit, k in seqs:
        p = plan.packed(unit)
        sl = p.pieces(k)
        for d, s, n in zip(p.doc[sl], p.start[sl], p.length[sl]):
            a = starts[plan.doc_ends[unit] + d] + s
            seen[a : a + n] += 1
    return seen


@SETTINGS
@given(
    units=st.lists(UNIT, min_size=1, max_size=8),
    seq_len=st.integers(1, 40),
    topo=TOPOLOGY,
    packing=st.sampled_from(PACKINGS),
    seed=st.integers(0, 5),
)
def test_every_token_once_but_a_tail_under_one_global_batch(
    units: list[list[int]], seq_len: int, topo: tuple[int, int, int], packing: str, seed: int
) -> None:
    t = Topology(*topo)
    plan = _plan(units, seq_len, t, packing=packing, seed=seed)
    if plan is None:
        return
    seqs = _consumed(plan)
    assert len(set(seqs)) == len(seqs)
    assert plan.num_left_out < t.slots * t.batch_size
    assert len(seqs) + plan.num_left_out == plan.counts.sum()
    seen = _tokens(plan, seqs)
    assert seen.max(initial=0) <= 1
    left = [
        (u, k) for u in range(len(units)) for k in range(plan.counts[u]) if (u, k) not in set(seqs)
    ]
    assert (seen == 0).sum() == _tokens(plan, left).sum()  # missing tokens: the tail's only
    again = _plan(units, seq_len, t, packing=packing, seed=seed)
    assert again is not None and _consumed(again) == seqs  # deterministic


@SETTINGS
@given(
    units=st.lists(UNIT, min_size=2, max_size=8),
    seq_len=st.integers(1, 24),
    topo=TOPOLOGY,
    after=TOPOLOGY,
    packing=st.sampled_from(PACKINGS),
    frac=st.floats(0, 1),
)
def test_resume_at_a_sequence_continues_without_loss_or_repeat(
    units: list[list[int]],
    seq_len: int,
    topo: tuple[int, int, int],
    after: tuple[int, int, int],
    packing: str,
    frac: float,
) -> None:
    plan = _plan(units, seq_len, Topology(*topo), packing=packing, seed=2)
    if plan is None:
        return
    k = int(frac * plan.batches_per_rank)
    before = _consumed(plan, k)
    same = plan.resume(k)
    assert before + _consumed(same) == _consumed(plan)  # exact on the same topology
    try:
        moved = plan.resume(k, Topology(*after))
    except PlanError:
        return
    rest = _consumed(moved)
    assert not set(before) & set(rest) and len(set(rest)) == len(rest)
    assert moved.counts is plan.counts  # nothing repacked: O(units)


@SETTINGS
@given(
    units=st.lists(UNIT, min_size=2, max_size=8),
    split=st.integers(1, 7),
    weights=st.tuples(st.integers(0, 5), st.integers(1, 5)),
    seq_len=st.integers(1, 24),
    packing=st.sampled_from(PACKINGS),
    topo=TOPOLOGY,
)
def test_token_weights_give_exact_token_quotas(
    units: list[list[int]],
    split: int,
    weights: tuple[int, int],
    seq_len: int,
    packing: str,
    topo: tuple[int, int, int],
) -> None:
    split = min(split, len(units) - 1)
    mixing = Mixing((0, split, len(units)), tuple(Rule(weight=w) for w in weights))
    plan = _plan(units, seq_len, Topology(*topo), packing=packing, mixing=mixing, seed=1)
    if plan is None:
        return
    seqs = _consumed(plan)
    per_source = [sum(u < split for u, _ in seqs), sum(u >= split for u, _ in seqs)]
    stats = token_stats(plan)
    assert [s["epoch_sequences"] for s in stats] == per_source
    assert [s["epoch_tokens"] for s in stats] == [n * seq_len for n in per_source]
    sizes = [int(plan.counts[:split].sum()), int(plan.counts[split:].sum())]
    w = np.array(weights, float) * (np.array(sizes) > 0)
    share = w / w.sum() * sum(per_source)
    assert all(abs(n - s) <= 1 for n, s in zip(per_source, share))  # token shares, to a sequence


@SETTINGS
@given(
    units=st.lists(UNIT, min_size=1, max_size=8),
    seq_len=st.integers(1, 24),
    packing=st.sampled_from(PACKINGS),
)
def test_canonical_workers_give_the_same_global_batches(
    units: list[list[int]], seq_len: int, packing: str
) -> None:
    seen = set()
    for n, w in ((1, 1), (1, 2), (2, 1), (2, 2), (4, 1)):
        plan = _plan(units, seq_len, Topology(n, w, 8 // n), packing=packing, canonical_workers=4)
        seen.add(None if plan is None else tuple(_consumed(plan)))
    assert len(seen) == 1


def test_stats_count_tokens_padding_and_splits() -> None:
    units = [[5, 3, 9, 1], [4, 4], [12]]
    for packing, seqs, split in (("concat", 3 + 1 + 2, 2), ("pad", 1 + 1 + 2 + 1 + 1 + 1 + 2, 2)):
        plan = _plan(units, 8, Topology(1), packing=packing)
        assert plan is not None
        (s,) = token_stats(plan)
        assert (s["documents"], s["tokens"], s["sequences"]) == (7, 38, seqs)
        assert s["padding_tokens"] == seqs * 8 - 38 and s["split_documents"] == split
        assert s["epoch_sequences"] == seqs and s["epoch_tokens"] == seqs * 8


@SETTINGS
@given(units=st.lists(UNIT, min_size=1, max_size=6), seq_len=st.integers(1, 40), t=TOPOLOGY)
def test_lengths_given_as_a_function_are_read_when_first_needed(
    units: list[list[int]], seq_len: int, t: tuple[int, int, int]
) -> None:
    from shardwise.errors import ConfigError
    from shardwise.plan.packing import count_sequences

    topology = Topology(t[0], t[1], t[2])
    eager = _plan(units, seq_len, topology, shuffle=False)
    if eager is None:
        return
    calls: list[int] = []

    def lengths() -> np.ndarray:
        calls.append(1)
        return eager.lengths

    totals = np.array([sum(u) for u in units], dtype=np.int64)
    counts = -(-totals // seq_len)  # concat: a unit's tokens give its sequences
    assert np.array_equal(counts, count_sequences(eager.lengths, eager.docs, seq_len))
    lazy = TokenPlan(lengths, eager.docs, seq_len, topology, shuffle=False, counts=counts)
    w = topology.num_workers - 1
    assert np.array_equal(lazy.worker(0, w).pairs(), eager.worker(0, w).pairs())
    assert np.array_equal(lazy.resume(0).worker(0, w).pairs(), eager.resume(0).worker(0, w).pairs())
    assert not calls  # the plan and its resume never needed the lengths
    assert np.array_equal(lazy.unit_lengths(0), eager.unit_lengths(0)) and len(calls) == 1
    assert np.array_equal(lazy.lengths, eager.lengths) and len(calls) == 1  # read once
    with pytest.raises(ConfigError, match="counts="):
        TokenPlan(lengths, eager.docs, seq_len, topology)
