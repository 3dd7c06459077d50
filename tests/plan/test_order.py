"""Seeded orders (plan/order.py): the stratified unit order and window order."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.plan import EpochPlan, Topology
from shardwise.plan.order import spread_order, stratified_order


def test_sorted_data_every_worker_and_window_spans_the_dataset() -> None:
    """Units stored sorted by label (20 labels x 10 units): with the stratified unit order
    every worker sees every label and every window of 5 units holds 5 different labels;
    a uniform permutation would leave some windows with repeated labels."""
    label = np.repeat(np.arange(20), 10)
    t = Topology(2, 2, 10, interleave=5)
    for epoch in range(3):
        plan = EpochPlan([100] * 200, t, seed=7, epoch=epoch)
        for r in range(2):
            for w in range(2):
                wp = plan.worker(r, w)
                assert set(label[wp.units()].tolist()) == set(range(20))
                for units, _, _ in wp.iter_windows():
                    assert len(set(label[units].tolist())) == len(units)


@given(
    sizes=st.lists(st.integers(0, 300), min_size=1, max_size=12),
    batch=st.integers(1, 64),
    seed=st.integers(0, 99),
)
@settings(max_examples=80, deadline=None)
def test_stratified_order_deals_every_key_evenly(sizes: list[int], batch: int, seed: int) -> None:
    keys = np.repeat(np.arange(len(sizes)), sizes)
    np.random.default_rng(seed).shuffle(keys)
    n = len(keys)
    order = stratified_order(keys, batch, np.random.default_rng(seed))
    assert sorted(order.tolist()) == list(range(n))
    assert order.tolist() == stratified_order(keys, batch, np.random.default_rng(seed)).tolist()
    if (
        n % batch == 0 and n
    ):  # then every batch is one dealt group: each key within one of its share
        groups = n // batch
        for b in range(groups):
            got = np.bincount(keys[order[b * batch : (b + 1) * batch]], minlength=len(sizes))
            for k, size in enumerate(sizes):
                assert size // groups <= got[k] <= -(-size // groups)


def test_sorted_data_batches_are_closer_to_the_mix_than_random_ones() -> None:
    """Label-sorted units (10 labels), one worker mixing all of them: dealt batches hold
    every label in proportion, so their mean TVD from the global mix is far below that of
    i.i.d. batches (about 0.075 for 10 equal labels and batches of 256)."""
    counts = np.random.default_rng(0).integers(500, 4000, 100)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    plan = EpochPlan(counts, Topology(1, 1, 256, interleave=100), seed=3)
    pairs = plan.worker(0, 0).pairs()
    label = (starts[pairs[:, 0]] + pairs[:, 1]) * 10 // counts.sum()
    mix = np.bincount(label, minlength=10) / len(label)
    tvd = [
        0.5 * np.abs(np.bincount(label[s : s + 256], minlength=10) / 256 - mix).sum()
        for s in range(0, len(label) - 255, 256)
    ]
    iid = (
        0.5
        * np.abs(np.random.default_rng(1).multinomial(256, mix, 2000) / 256 - mix)
        .sum(axis=1)
        .mean()
    )
    assert iid > 0.07
    assert np.mean(tvd) < 0.5 * iid


@given(
    counts=st.lists(st.integers(0, 10_000), max_size=400),
    slots=st.integers(1, 64),
    interleave=st.integers(1, 70),
    seed=st.integers(0, 99),
)
@settings(max_examples=60, deadline=None)
def test_spread_order_is_a_permutation(
    counts: list[int], slots: int, interleave: int, seed: int
) -> None:
    order = spread_order(
        np.array(counts, dtype=np.int64), slots, interleave, np.random.default_rng(seed)
    )
    assert sorted(order.tolist()) == list(range(len(counts)))
