"""Loader plans (pure numpy, no I/O): which (unit, row) each rank and worker yields."""

from shardwise.plan.budget import auto_interleave
from shardwise.plan.epoch import EpochPlan, Resume, Topology, WorkerPlan

__all__ = ["EpochPlan", "Resume", "Topology", "WorkerPlan", "auto_interleave"]
