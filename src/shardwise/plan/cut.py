"""Cutting an epoch's stream into equal pieces, one per (rank, worker) (pure)."""

from __future__ import annotations

from dataclasses import dataclass

from shardwise.errors import PlanError
from shardwise.plan.topology import Topology

__all__ = ["Cut", "cut", "delivered"]


@dataclass(frozen=True)
class Cut:
    """How a stream of ``n`` samples is shared.

    Attributes:
        samples_per_worker: samples of each (rank, worker), a multiple of the batch size.
        num_left_out: samples dropped at the tail (``drop_last=True``).
        num_padded: samples repeated from the start of the order (``drop_last=False``).
    """

    samples_per_worker: int
    num_left_out: int
    num_padded: int


def cut(n: int, topology: Topology, fresh: bool = True) -> Cut:
    """Share ``n`` samples among ``topology``'s workers in equal whole batches.

    ``fresh`` is False for what is left after an elastic resume, which may legitimately
    be too little for a batch; a fresh epoch with no batch at all is an error.
    """
    t = topology
    quantum = t.slots * t.batch_size
    if n == 0 and fresh:
        raise PlanError("nothing to plan: the dataset has no samples")
    per_slot = (n // quantum if t.drop_last else -(-n // quantum)) * t.batch_size
    if per_slot == 0 and fresh:
        raise PlanError(
            f"{n} samples are fewer than world_size*num_workers*batch_size = {quantum}; "
            "with drop_last=True no rank would get a batch (use drop_last=False or a smaller batch)"
        )
    return Cut(per_slot, max(0, n - per_slot * t.slots), max(0, per_slot * t.slots - n))


def delivered(slot: int, consumed_batches: int, num_workers: int) -> int:
    """Worker batches delivered by ``slot`` after its rank consumed ``consumed_batches``
    (a DataLoader collects its workers' batches round-robin)."""
    w = slot % num_workers
    return max(0, -(-(consumed_batches - w) // num_workers))
