"""Loader plans (pure numpy, no I/O): which (unit, row) each rank and worker yields.

May import: numpy, the standard library and ``shardwise.errors`` only.
"""

from shardwise.plan.budget import auto_interleave
from shardwise.plan.epoch import EpochPlan, Resume, Topology, WorkerPlan
from shardwise.plan.mix import Mixing, Rule
from shardwise.plan.plans import Plan, batch_shares, make_plan, source_counts

__all__ = [
    "EpochPlan",
    "Mixing",
    "Plan",
    "Resume",
    "Rule",
    "Topology",
    "WorkerPlan",
    "auto_interleave",
    "batch_shares",
    "make_plan",
    "source_counts",
]
