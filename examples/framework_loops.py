"""Consuming a shard without a PyTorch DataLoader: a JAX-style loop and a DALI external source.

``StreamingDataset.iter_shard(rank, world_size, worker_id, num_workers)`` is a plain iterator
of ready batches, so any framework can drive it. Run: ``python examples/framework_loops.py``
(uses JAX if installed, else numpy; the DALI class only needs DALI when you use it).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np

import shardwise


class DaliExternalSource:
    """A callable for ``nvidia.dali.fn.external_source(source=..., batch=True)``.

    DALI calls it once per iteration with ``info.iteration``; we return this rank's next
    batch as a list of per-sample numpy arrays, and raise StopIteration at the epoch's end.
    """

    def __init__(self, ds: Any, rank: int, world_size: int, column: str) -> None:
        self.ds, self.rank, self.world_size, self.column = ds, rank, world_size, column
        self.it: Iterator[dict[str, np.ndarray]] | None = None

    def __call__(self, info: Any) -> list[np.ndarray]:
        if self.it is None or getattr(info, "iteration", 1) == 0:
            self.it = self.ds.iter_shard(self.rank, self.world_size)
        batch = next(self.it)  # StopIteration ends DALI's epoch
        return list(batch[self.column])


def jax_style_loop(path: str, rank: int, world_size: int) -> int:
    try:
        import jax.numpy as xp
    except ImportError:
        xp = np
    ds = shardwise.StreamingDataset(
        path, batch_size=32, batch_format="numpy", columns=["id"], seed=0
    )
    steps = 0
    for epoch in range(2):
        ds.set_epoch(epoch)
        for batch in ds.iter_shard(rank, world_size):
            labels = xp.asarray(batch["id"])
            _ = labels.sum()  # a train step would go here
            steps += 1
    return steps


if __name__ == "__main__":
    data = sys.argv[1] if len(sys.argv) > 1 else os.path.join("demo_out", "clean")
    if not os.path.exists(data):
        sys.exit(f"{data} not found: run `make demo` first or pass a dataset path")
    ds = shardwise.StreamingDataset(data, batch_size=16, batch_format="numpy", columns=["id"])
    source = DaliExternalSource(ds, rank=0, world_size=2, column="id")
    print("DALI-style source, first batch ids:", source(type("Info", (), {"iteration": 0})())[:4])
    print(
        "JAX-style loop, steps per rank over 2 epochs:",
        [jax_style_loop(data, r, 2) for r in range(2)],
    )
