"""A frozen digest of many plans: random counts, topologies, seeds, epochs, shuffles, and
resumes on the same and on other topologies. Any change to what a plan yields (even an
order that still meets every contract) changes it: such a change breaks the resume of
every saved loader state, so it must be deliberate (update the digest and say so, and
raise the layout saved states record: ``shardwise.plan.deal.DEAL_VERSION`` for random
mixed plans, ``shardwise.plan.strata.STRATA_VERSION`` for stratified ones, which a state
of another layout then refuses to resume)."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from shardwise.plan import EpochPlan, Plan, Topology
from shardwise.plan.deal import DEAL_VERSION
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import make_plan
from shardwise.plan.strata import STRATA_VERSION

# 2026-11-30: an elastic resume of a padded epoch continues with each undelivered sample
# once (shardwise.plan.padcopies; loader states of version 2)
FROZEN = "5c531e0cdfa825c84c59eb396afc28e8d6276d53f2d287e4f1f86d9774267c36"
# mixed plans, random (layout 2: every source dealt to every worker in proportion) and stratified
# (layout 2: the rounding of each source's share carried from batch to batch)
FROZEN_MIXED = "fab3035cf21e68eb9a1c4fdb5bd17d2d8db408d50dbd3901b61ebb78f73e3f1d"


def _topology(rng: np.random.Generator) -> Topology:
    return Topology(
        int(rng.integers(1, 4)),
        int(rng.integers(1, 4)),
        int(rng.integers(1, 6)),
        bool(rng.integers(0, 2)),
        int(rng.integers(1, 5)),
    )


def _feed(h: Any, p: Plan) -> None:
    for r in range(p.topology.world_size):
        for b in p.rank_batches(r):
            h.update(b.tobytes())


def test_plans_are_frozen() -> None:
    h = hashlib.sha256()
    rng = np.random.default_rng(123)
    for _ in range(40):
        counts = rng.integers(0, 60, size=int(rng.integers(1, 30)))
        if counts.sum() == 0:
            counts[0] = 5
        t = _topology(rng)
        try:
            p = EpochPlan(
                counts,
                t,
                seed=int(rng.integers(0, 100)),
                epoch=int(rng.integers(0, 3)),
                shuffle=bool(rng.integers(0, 4)),
            )
        except Exception as e:
            h.update(repr(type(e)).encode())
            continue
        _feed(h, p)
        h.update(str((p.num_left_out, p.num_padded, p.batches_per_rank)).encode())
        q = p
        for _ in range(2):
            k = int(rng.integers(0, q.batches_per_rank + 1))
            t2 = _topology(rng) if rng.integers(0, 2) else q.topology
            try:
                q = q.resume(k, t2)
            except Exception as e:
                h.update(repr(type(e)).encode())
                break
            _feed(h, q)
            h.update(str((q.num_left_out, q.num_padded, q.batches_per_rank, q.generation)).encode())
    assert h.hexdigest() == FROZEN


def test_mixed_plans_are_frozen() -> None:
    assert (
        DEAL_VERSION == 2 and STRATA_VERSION == 2
    )  # a new layout needs a new FROZEN_MIXED, and the other way round
    h = hashlib.sha256()
    rng = np.random.default_rng(7)
    for i in range(30):
        sources = int(rng.integers(1, 4))
        sizes = [int(rng.integers(1, 6)) for _ in range(sources)]
        counts = rng.integers(0, 40, size=sum(sizes))
        bounds = tuple(np.cumsum([0, *sizes]).tolist())
        rules = tuple(Rule(weight=float(rng.integers(1, 5))) for _ in range(sources))
        mixing = Mixing(bounds, rules, int(rng.integers(20, 200)), ("random", "stratified")[i % 2])
        t = _topology(rng)
        try:
            p = make_plan(
                counts,
                t,
                seed=int(rng.integers(0, 100)),
                epoch=int(rng.integers(0, 3)),
                shuffle=bool(rng.integers(0, 4)),
                mixing=mixing,
            )
            _feed(h, p)
            k = int(rng.integers(0, p.batches_per_rank + 1))
            _feed(h, p.resume(k, _topology(rng) if rng.integers(0, 2) else None))
        except Exception as e:
            h.update(repr(type(e)).encode())
    assert h.hexdigest() == FROZEN_MIXED
