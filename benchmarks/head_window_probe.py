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

Two helpers for the estimates in ``results/loader-head-window-2026-11-28.md``::

    ... head_window_probe.py heads DIR OUT   # OUT: every unit's head, one row group each
    ... head_window_probe.py tvd DIR         # mean batch TVD of the plan on DIR's labels
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
    import pandas  # noqa: F401  (pyarrow's first to_numpy imports it: 0.3 s, not the read's)
    import pyarrow.compute  # noqa: F401
    import torch  # noqa: F401  (imported before the clock, as in the benchmark)

    from shardwise.plan import EpochPlan

    units = _units(path)
    counts, t, k = _k(units)
    k = k if mode == "head" else 1
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


def _k(units: list[tuple[str, int, int, int]]) -> tuple[Any, Any, int]:
    """Counts, the one-worker topology and ``k`` (auto) of ``units``."""
    import numpy as np

    from shardwise.plan import Topology, auto_interleave
    from shardwise.plan.blocks import auto_blocks

    counts = np.array([u[2] for u in units], dtype=np.int64)
    t = Topology(1, 1, BATCH, True, auto_interleave(np.array([u[3] for u in units])))
    return counts, t, auto_blocks(counts, t)


def write_heads(path: str, out: str) -> None:
    """Write every unit's first ``n // k`` rows to ``out``, one row group per unit."""
    import pyarrow.parquet as pq

    units = _units(path)
    _, _, k = _k(units)
    os.makedirs(out, exist_ok=True)
    for f in sorted({u[0] for u in units}):
        pf = pq.ParquetFile(f)
        with pq.ParquetWriter(os.path.join(out, os.path.basename(f)), pf.schema_arrow) as w:
            for g in range(pf.metadata.num_row_groups):
                table = pf.read_row_group(g)
                w.write_table(table.slice(0, table.num_rows // k), row_group_size=1 << 30)
    print(f"k={k}: heads of {len(units)} units in {out}")


def tvd(path: str) -> None:
    """Mean batch TVD from the label mix, rank 0, 3 seeds: no blocks, head, even blocks."""
    import numpy as np
    import pyarrow.parquet as pq

    from shardwise.plan import EpochPlan

    units = _units(path)
    counts, t, k = _k(units)
    labels = [
        pq.ParquetFile(f).read_row_group(g, columns=["label"]).column(0).to_numpy()
        for f, g, _, _ in units
    ]
    n = int(max(x.max() for x in labels)) + 1
    mix = np.bincount(np.concatenate(labels), minlength=n) / counts.sum()
    for name, blocks, even in (("none", 1, False), (f"head k={k}", k, False), ("even", k, True)):
        means = []
        for seed in range(3):
            plan = EpochPlan(counts, t, seed=seed, blocks=blocks, even_blocks=even)
            got = [
                0.5
                * np.abs(
                    np.bincount([labels[u][r] for u, r in b.tolist()], minlength=n) / len(b) - mix
                ).sum()
                for b in plan.rank_batches(0)
            ]
            means.append((np.mean(got), np.mean(got[:10])))
        a, f10 = np.mean(means, axis=0)
        print(f"{name}: mean batch TVD {a:.3f}, first 10 batches {f10:.3f}")


if __name__ == "__main__":
    if sys.argv[1] == "heads":
        write_heads(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "tvd":
        tvd(sys.argv[2])
    else:
        main(sys.argv[1], sys.argv[2])
