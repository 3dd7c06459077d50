"""MosaicML streaming's side of the mixing benchmark: its planning at scale.

Runs in the peer venv (``benchmarks/.venv-mosaic``). Mosaic plans an epoch with
``get_partitions`` (every sample id of the epoch, per node, rank, worker and batch) over
the mixed streams' sample ids, which it draws per stream with ``choose``/``repeat``
(``StreamingDataset._resample_streams``), and shuffles shards with ``get_shuffle``. Both
are run here on the same sizes as shardwise (three streams, 50/30/20 % of the units),
under an address-space cap so that an array of every sample id cannot take the machine.
"""

from __future__ import annotations

import resource
import time
from typing import Any

import numpy as np
from harness.monitor import TreeMonitor

WEIGHTS = (0.5, 0.3, 0.2)
CAP_BYTES = 6 * 2**30


def _counts(units: int, samples: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    raw = rng.uniform(0.5, 1.5, size=units)
    return np.maximum(1, np.round(raw / raw.sum() * samples)).astype(np.int64)


def plan_at_scale(
    *, units: int, samples: int, ranks: int, workers: int, batch: int, **_: Any
) -> dict[str, Any]:
    """Mosaic's epoch plan: shard shuffle, per-stream sample choice, partition of all ids."""
    from streaming.base.partition import get_partitions
    from streaming.base.shuffle import get_shuffle

    resource.setrlimit(resource.RLIMIT_AS, (CAP_BYTES, CAP_BYTES))
    counts = _counts(units, samples)
    bounds = [0, units // 2, units * 8 // 10, units]
    mon = TreeMonitor().start()
    t0 = time.perf_counter()
    try:
        total = int(counts.sum())
        rng = np.random.default_rng(0)
        ids = []
        for s in range(3):  # per stream: its samples, chosen to its proportion of the epoch
            lo, hi = int(counts[: bounds[s]].sum()), int(counts[: bounds[s + 1]].sum())
            ids.append(rng.choice(np.arange(lo, hi), int(total * WEIGHTS[s]), replace=True))
        sizes = counts.astype(np.int64)
        nodes, per_node = max(1, ranks // 8), min(8, ranks)
        shuffle = get_shuffle("py1e", sizes, nodes, 0, 0, 1 << 18)
        parts = get_partitions(
            "orig", int(sum(len(x) for x in ids)), nodes, nodes, per_node, workers, batch
        )
        t1 = time.perf_counter()
        error = None
    except MemoryError:
        t1, error, shuffle, parts = (
            time.perf_counter(),
            f"MemoryError under a {CAP_BYTES >> 30} GiB cap",
            None,
            None,
        )
    mon.stop()
    out: dict[str, Any] = {
        "plan_s": t1 - t0,
        "peak_rss_mb": mon.peak_rss_mb,
        "samples": int(counts.sum()),
        "units": units,
    }
    if error:
        out["plan_error"] = error
    else:
        out["partition_shape"] = list(parts.shape)  # type: ignore[union-attr]
        out["shuffle_len"] = len(shuffle)  # type: ignore[arg-type]
    return out
