"""Cutting a stream into equal whole-batch pieces (plan/cut.py)."""

from __future__ import annotations

from shardwise.errors import PlanError
from shardwise.plan import Topology
from shardwise.plan.cut import cut, delivered


def test_cut_shares_whole_batches_and_accounts_for_every_sample() -> None:
    for n in range(0, 200, 7):
        for ws, nw, b in ((1, 1, 1), (2, 3, 4), (4, 2, 5)):
            for drop in (True, False):
                t = Topology(ws, nw, b, drop)
                try:
                    c = cut(n, t)
                except PlanError:
                    assert n == 0 or (drop and n < ws * nw * b)
                    continue
                assert c.samples_per_worker % b == 0
                assert c.samples_per_worker * t.slots == n - c.num_left_out + c.num_padded
                assert c.num_left_out < ws * nw * b and c.num_padded < ws * nw * b
                assert c.num_left_out == 0 or c.num_padded == 0


def test_delivered_follows_the_dataloader_round_robin() -> None:
    for workers in (1, 2, 3, 5):
        for consumed in range(20):
            got = [delivered(slot, consumed, workers) for slot in range(workers)]
            assert sum(got) == consumed and max(got) - min(got) <= 1
