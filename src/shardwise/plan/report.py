"""What a plan costs, computed without reading data: steps, drops, read amplification,
and the bytes a worker buffers at once."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.plan.plans import Plan

__all__ = ["plan_report"]


def plan_report(plan: Plan, unit_bytes: np.ndarray, prefetch_windows: int = 2) -> dict[str, Any]:
    """Summarise ``plan`` given each unit's size in bytes.

    ``read_amplification`` is bytes read by all workers over the bytes of units that
    hold planned samples (1.0 = every unit read once; units cut between two workers and
    padding push it above 1). ``peak_buffered_bytes`` is the largest sum of unit sizes
    over ``prefetch_windows`` consecutive windows of one worker (on-storage size; decoded
    Arrow data is typically larger).
    """
    t = plan.topology
    unit_bytes = np.asarray(unit_bytes, dtype=np.int64)
    read = 0
    peak = 0
    used: set[int] = set()
    for rank in range(t.world_size):
        for w in range(t.num_workers):
            wp = plan.worker(rank, w)
            units = wp.units()
            used.update(units)
            read += int(unit_bytes[units].sum()) if units else 0
            sizes = [int(unit_bytes[wu].sum()) for wu, _, _ in wp.iter_windows()]
            for i in range(len(sizes)):
                peak = max(peak, sum(sizes[i : i + prefetch_windows]))
    useful = int(unit_bytes[sorted(used)].sum()) if used else 0
    return {
        "world_size": t.world_size,
        "workers_per_rank": t.num_workers,
        "batch_size": t.batch_size,
        "steps_per_rank": plan.batches_per_rank,
        "samples_per_rank": plan.samples_per_rank,
        "samples_left_out": plan.num_left_out,
        "samples_padded": plan.num_padded,
        "read_amplification": read / useful if useful else 0.0,
        "peak_buffered_bytes": peak,
    }
