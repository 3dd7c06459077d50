"""shardwise's side of the mixing benchmark: planning at scale, and realised proportions.

Runs in the repository's interpreter. Planning works on per-unit counts alone (no files):
``units`` units holding ``samples`` samples in all, cut into three sources by weight.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from harness.monitor import TreeMonitor

WEIGHTS = (0.5, 0.3, 0.2)


def synthetic_counts(units: int, samples: int, seed: int = 0) -> np.ndarray:
    """``units`` unit sizes (uneven, 0.5x to 1.5x the mean) summing to about ``samples``."""
    rng = np.random.default_rng(seed)
    raw = rng.uniform(0.5, 1.5, size=units)
    return np.maximum(1, np.round(raw / raw.sum() * samples)).astype(np.int64)


def _mixing(units: int, batching: str) -> Any:
    from shardwise.plan import Mixing, Rule

    bounds = (0, units // 2, units * 8 // 10, units)  # three sources: 50 %, 30 %, 20 % of the units
    return Mixing(bounds, tuple(Rule(weight=w) for w in WEIGHTS), None, batching)


def plan_at_scale(
    *,
    units: int,
    samples: int,
    ranks: int,
    workers: int,
    batch: int,
    batching: str,
    elastic: bool = False,
    **_: Any,
) -> dict[str, Any]:
    """Time make_plan, one worker's whole plan, and a mid-epoch resume (same topology, or
    with ``elastic`` on half the ranks with twice the batch); peak RSS of the process."""
    from shardwise.plan import Topology, make_plan

    counts = synthetic_counts(units, samples)
    mixing = _mixing(units, batching)
    topo = Topology(ranks, workers, batch, True, 4)
    mon = TreeMonitor().start()
    t0 = time.perf_counter()
    plan = make_plan(counts, topo, seed=0, epoch=0, mixing=mixing)
    t1 = time.perf_counter()
    rows = sum(len(r) for _, _, r in plan.worker(ranks // 3, workers - 1).iter_windows())
    t2 = time.perf_counter()
    after = Topology(ranks // 2, workers, batch * 2, True, 4) if elastic else None
    resumed = plan.resume(plan.batches_per_rank // 2, after)
    rows_after = sum(len(r) for _, _, r in resumed.worker(ranks // 5, 1).iter_windows())
    t3 = time.perf_counter()
    mon.stop()
    return {
        "plan_s": t1 - t0,
        "worker_s": t2 - t1,
        "resume_s": t3 - t2,
        "total_s": t3 - t0,
        "peak_rss_mb": mon.peak_rss_mb,
        "samples": int(counts.sum()),
        "units": units,
        "steps_per_rank": plan.batches_per_rank,
        "worker_rows": rows,
        "resumed_worker_rows": rows_after,
    }


def proportions(
    *, units: int, samples: int, ranks: int, workers: int, batch: int, batching: str, **_: Any
) -> dict[str, Any]:
    """Realised shares of an epoch: per epoch (exact counts vs the weights) and per global
    batch (mean and worst absolute deviation of a source's share from its weight)."""
    from shardwise.plan import Topology, make_plan

    counts = synthetic_counts(units, samples)
    mixing = _mixing(units, batching)
    plan = make_plan(
        counts, Topology(ranks, workers, batch, True, 4), seed=0, epoch=0, mixing=mixing
    )
    source_of = np.searchsorted(np.asarray(mixing.bounds), np.arange(units), side="right") - 1
    per_rank = [plan.rank_batches(r) for r in range(ranks)]
    steps = len(per_rank[0])
    shares = np.zeros((steps, 3))
    for s in range(steps):
        units_in = np.concatenate([per_rank[r][s][:, 0] for r in range(ranks)])
        shares[s] = np.bincount(source_of[units_in], minlength=3) / len(units_in)
    epoch = shares.mean(axis=0)
    dev = np.abs(shares - np.asarray(WEIGHTS))
    return {
        "epoch_shares": epoch.tolist(),
        "epoch_max_dev": float(np.abs(epoch - WEIGHTS).max()),
        "batch_mean_dev": float(dev.mean()),
        "batch_max_dev": float(dev.max()),
        "global_batches": steps,
        "global_batch": ranks * batch,
    }
