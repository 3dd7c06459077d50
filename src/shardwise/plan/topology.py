"""The training topology a plan is cut for, and a point where an epoch was interrupted."""

from __future__ import annotations

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
            if int(getattr(self, name)) < 1:
                raise PlanError(f"{name} must be at least 1, got {getattr(self, name)}")

    @property
    def slots(self) -> int:
        return self.world_size * self.num_workers


@dataclass(frozen=True)
class Resume:
    """A point where the epoch was interrupted: the topology then, and batches consumed per rank."""

    topology: Topology
    consumed_batches: int

    def to_dict(self) -> dict[str, Any]:
        return {"topology": asdict(self.topology), "consumed_batches": self.consumed_batches}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Resume:
        n = d["consumed_batches"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlanError(f"a state's consumed_batches must be a whole number >= 0, got {n!r}")
        return cls(Topology(**d["topology"]), n)
