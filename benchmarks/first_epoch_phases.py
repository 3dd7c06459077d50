#!/usr/bin/env python
"""Where the first epoch of a fresh process goes: wall, user and system CPU seconds and
minor page faults of each phase (torch's import, shardwise's, the dataset's construction,
the first batch, the rest of the epoch, the second epoch), or of the one-thread raw scan.

Run from the repository root, one fresh process per call::

    PYTHONPATH=src .venv/bin/python benchmarks/first_epoch_phases.py loader DIR [COLUMN ...]
    PYTHONPATH=src .venv/bin/python benchmarks/first_epoch_phases.py scan DIR [COLUMN ...]

``DIR`` holds Parquet files; the CPU seconds are the whole process's (every thread).
"""

from __future__ import annotations

import os
import resource
import sys
import time
from typing import Any

_last: list[Any] = []


def mark(name: str) -> None:
    """Print the phase that ended now."""
    now = [time.perf_counter(), os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt]
    if _last:
        t, c, f = _last
        print(
            f"{name:34s} wall {now[0] - t:6.3f} s  user {now[1].user - c.user:6.3f} s  "
            f"sys {now[1].system - c.system:6.3f} s  minflt {now[2] - f:8d}",
            flush=True,
        )
    _last[:] = now


def scan(path: str, cols: list[str] | None) -> None:
    """``ParquetFile.iter_batches(65,536)`` on one thread, every column to numpy."""
    import glob

    import pyarrow.parquet as pq

    mark("import pyarrow.parquet")
    for f in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        for rb in pq.ParquetFile(f).iter_batches(65536, columns=cols, use_threads=False):
            for col in rb.columns:
                col.to_numpy(zero_copy_only=False)
    mark("raw scan epoch")


def loader(path: str, cols: list[str] | None) -> None:
    """The in-process numpy path, default settings, two epochs."""
    from shardwise.loader import StreamingDataset

    mark("import shardwise.loader")
    ds = StreamingDataset(
        path, batch_size=256, shuffle=True, seed=0, drop_last=True, batch_format="numpy",
        num_workers=None, progress=False, columns=cols,
    )  # fmt: skip
    mark(f"construct ({ds.index.num_units} units, interleave {ds.interleave})")
    it = iter(ds)
    rows = len(next(it)["id"])
    mark("first batch")
    rows += sum(len(b["id"]) for b in it)
    mark(f"rest of epoch 1 ({rows:,} rows)")
    ds.set_epoch(1)
    rows = sum(len(b["id"]) for b in ds)
    mark(f"epoch 2 ({rows:,} rows)")


def main(argv: list[str]) -> int:
    mark("start")
    import torch  # noqa: F401  (a training process has it)

    mark("import torch")
    print(f"load 1m {os.getloadavg()[0]:.2f}", flush=True)
    (scan if argv[0] == "scan" else loader)(argv[1], argv[2:] or None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
