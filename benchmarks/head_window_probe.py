#!/usr/bin/env python
"""What a head window would give the first batch of a fresh process (issue 35, part 1).

The loader does not read units in parts yet, so this probe reads the Parquet units of
``DIR`` the way it would: on two threads, ``whole`` units (``read_row_group``, as the loader
today) or every unit's ``head`` (its first ``n // k`` rows, ``iter_batches`` of one row
group, which decodes page by page), ``k`` from :func:`shardwise.plan.blocks.auto_blocks`.
It then gathers the plan's first batch (``EpochPlan(..., blocks=k)``, one worker, batches
of 256, the default ``interleave``) and converts its columns to numpy. Wall time to that
batch, then to the rest of the decode (the heads' iterators continued), one fresh process
per call, torch imported first::

    PYTHONPATH=src .venv/bin/python benchmarks/head_window_probe.py whole|head DIR
"""

from __future__ import annotations

import glob
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

BATCH = 256


def _units(path: str) -> list[tuple[str, int, int, int]]:
    """(file, row group, rows, stored bytes) of every row group, in file order."""
    import pyarrow.parquet as pq

    out = []
    for f in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        md = pq.ParquetFile(f).metadata
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            size = sum(rg.column(c).total_compressed_size for c in range(rg.num_columns))
            out.append((f, g, rg.num_rows, size))
    return out


def _read(unit: tuple[str, int, int, int], rows: int) -> tuple[Any, Any]:
    """The unit's first ``rows`` rows (all: the whole row group) and what reads the rest."""
    import pyarrow.parquet as pq

    f, g, n, _ = unit
    pf = pq.ParquetFile(f)
    if rows >= n:
        return pf.read_row_group(g, use_threads=False), None
    it = pf.iter_batches(batch_size=rows, row_groups=[g], use_threads=False)
    return next(it), it


def main(mode: str, path: str) -> None:
    import numpy as np
    import pandas  # noqa: F401  (pyarrow's first to_numpy imports it: 0.3 s, not the read's)
    import pyarrow.compute  # noqa: F401
    import torch  # noqa: F401  (imported before the clock, as in the benchmark)

    from shardwise.plan import EpochPlan, Topology, auto_interleave
    from shardwise.plan.blocks import auto_blocks

    units = _units(path)
    counts = np.array([u[2] for u in units], dtype=np.int64)
    t = Topology(1, 1, BATCH, True, auto_interleave(np.array([u[3] for u in units])))
    k = auto_blocks(counts, t) if mode == "head" else 1
    start = time.perf_counter()
    plan = EpochPlan(counts, t, seed=0, blocks=k)
    window_units, unit_ids, rows = next(plan.worker(0, 0).iter_windows())
    with ThreadPoolExecutor(2) as pool:
        heads = dict(
            zip(
                window_units,
                pool.map(lambda u: _read(units[u], -(-int(counts[u]) // k) + 1), window_units),
            )
        )
        first_ids, first_rows = unit_ids[:BATCH], rows[:BATCH]
        parts = [heads[u][0].take(first_rows[first_ids == u]) for u in dict.fromkeys(first_ids)]
        cols = [[c.to_numpy(zero_copy_only=False) for c in p.columns] for p in parts]
        first = time.perf_counter() - start
        list(pool.map(lambda it: None if it is None else list(it), [h[1] for h in heads.values()]))
    rest = time.perf_counter() - start - first
    print(
        f"{mode} k={k} ({len(units)} units, interleave {t.interleave}, first window "
        f"{len(unit_ids):,} rows of {int(counts.sum()):,}): first batch {first:.3f} s, "
        f"rest of the window group's decode {rest:.3f} s ({len(cols)} parts)",
        flush=True,
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
