"""Helpers shared by the epoch-plan tests: a topology strategy and a plan that may be refused."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import strategies as st

from shardwise.errors import PlanError
from shardwise.plan import EpochPlan, Topology


def topologies(world: int, workers: int) -> st.SearchStrategy[Topology]:
    """Topologies of up to ``world`` ranks of up to ``workers`` workers."""
    return st.builds(
        Topology,
        world_size=st.integers(1, world),
        num_workers=st.integers(1, workers),
        batch_size=st.integers(1, 9),
        drop_last=st.booleans(),
        interleave=st.integers(1, 5),
    )


def plan_or_none(counts: list[int], t: Topology, **kw: Any) -> EpochPlan | None:
    """The epoch plan, or None after checking that it is refused (no rows, or fewer than
    one batch per slot under ``drop_last``)."""
    n = sum(counts)
    if n == 0 or (t.drop_last and n < t.slots * t.batch_size):
        with pytest.raises(PlanError):
            EpochPlan(counts, t, **kw)
        return None
    return EpochPlan(counts, t, **kw)
