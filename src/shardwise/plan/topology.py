"""The training topology a plan is cut for, and a point where an epoch was interrupted."""

from __future__ import annotations

import numbers
from dataclasses import asdict, dataclass
from typing import Any

from shardwise.errors import PlanError

__all__ = ["Resume", "Topology"]


@dataclass(frozen=True)
class Topology:
    """Where samples go.

    Attributes:
        world_size: ranks.
        num_workers: dataloader workers per rank (1 if loading in the training process).
        batch_size: samples per batch of one rank.
        drop_last: leave out the tail (True) or pad from the start of the order (False).
        interleave: segments (units) mixed together by one worker.
    """

    world_size: int
    num_workers: int = 1
    batch_size: int = 1
    drop_last: bool = True
    interleave: int = 4

    def __post_init__(self) -> None:
        for name in ("world_size", "num_workers", "batch_size", "interleave"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral):
                raise PlanError(f"{name} must be an integer, got {value!r}")  # not cut to one
            if value < 1:
                raise PlanError(f"{name} must be at least 1, got {value}")

    @property
    def slots(self) -> int:
        return self.world_size * self.num_workers


@dataclass(frozen=True)
class Resume:
    """A point where the epoch was interrupted: the topology then, and batches consumed per
    rank; or, where the ranks did not take their batches in lockstep (HF Accelerate's
    dispatcher drew every rank's pieces from rank 0's DataLoader), the batches each slot
    (``rank * num_workers + worker``) had delivered, counted from the start of this
    topology's pieces."""

    topology: Topology
    consumed_batches: int
    done: tuple[int, ...] | None = None

    def delivered(self, slot: int) -> int:
        """Batches ``slot`` had delivered (a DataLoader collects its workers' batches
        round-robin, so in lockstep worker ``w`` delivered every ``num_workers``-th)."""
        if self.done is not None:
            return self.done[slot]
        w = slot % self.topology.num_workers
        return max(0, -(-(self.consumed_batches - w) // self.topology.num_workers))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "topology": asdict(self.topology),
            "consumed_batches": self.consumed_batches,
        }
        if self.done is not None:
            d["done"] = list(self.done)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Resume:
        n = d["consumed_batches"]
        if not _count(n):
            raise PlanError(f"a state's consumed_batches must be a whole number >= 0, got {n!r}")
        topology = Topology(**d["topology"])
        done = d.get("done")
        if done is not None and (
            not isinstance(done, list) or len(done) != topology.slots or not all(map(_count, done))
        ):
            raise PlanError(
                f"a state's done must list {topology.slots} whole numbers >= 0 (one per rank "
                f"and worker), got {done!r}"
            )
        return cls(topology, n, None if done is None else tuple(done))


def _count(n: Any) -> bool:
    return not isinstance(n, bool) and isinstance(n, int) and n >= 0
