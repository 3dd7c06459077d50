"""A worker's own position, for loaders that save each worker's state separately
(torchdata's ``StatefulDataLoader`` calls ``dataset.state_dict()`` with no argument in
every worker, and gives each worker its own state back before it iterates again).

The position is (epoch, rank, world size, worker, workers) and the samples that worker
has yielded; resuming skips exactly those samples of the same worker's piece of the plan,
on every rank (ranks advance in lockstep over equal pieces, and frameworks such as
Lightning save rank 0's loader state alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Position"]


@dataclass(frozen=True)
class Position:
    """Samples one (rank, worker) yielded in an epoch."""

    epoch: int
    rank: int
    world_size: int
    worker_id: int
    num_workers: int
    samples: int = 0

    def where(self) -> tuple[int, int, int, int, int]:
        return (self.epoch, self.rank, self.world_size, self.worker_id, self.num_workers)

    def to_dict(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "rank": self.rank,
            "world_size": self.world_size,
            "worker_id": self.worker_id,
            "num_workers": self.num_workers,
            "samples": self.samples,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Position:
        return cls(
            int(d["epoch"]),
            int(d["rank"]),
            int(d["world_size"]),
            int(d["worker_id"]),
            int(d["num_workers"]),
            int(d["samples"]),
        )
