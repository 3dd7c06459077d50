"""A Parquet dataset of uneven files and row groups, with ids 0..n-1, for loader tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq


def make_parquet(root: Path, n: int = 10_007, files: int = 7, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    cuts = np.sort(rng.choice(np.arange(1, n), size=files - 1, replace=False))
    bounds = [0, *cuts.tolist(), n]
    for i in range(files):
        lo, hi = bounds[i], bounds[i + 1]
        ids = np.arange(lo, hi)
        table = pa.table(
            {
                "id": pa.array(ids, pa.int64()),
                "label": pa.array(ids % 10, pa.int64()),
                "x": pa.array((ids * 0.5).astype(np.float32)),
                "text": pa.array([f"doc {j}" for j in ids]),
            }
        )
        with pq.ParquetWriter(root / f"part-{i:02d}.parquet", table.schema) as w:
            start = 0
            while start < table.num_rows:
                size = int(rng.integers(50, 900))
                w.write_table(table.slice(start, size), row_group_size=size)
                start += size
    return root
