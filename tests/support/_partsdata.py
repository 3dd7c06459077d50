"""Parquet files for the tests of head windows through the node cache
(``tests/loader/read/test_cached_parts*.py``)."""

from __future__ import annotations

import gc
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROWS, GROUP = 2_000, 250


def write_files(root: Path, files: int = 3, seed: int = 0) -> list[Path]:
    """Files of row groups over 64 KiB (so a row group is not inside the footer's read):
    an id, a text, a fixed-size list and incompressible bytes."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = []
    for f in range(files):
        ids = np.arange(f * ROWS, (f + 1) * ROWS, dtype=np.int64)
        emb = rng.standard_normal(ROWS * 8).astype(np.float32)
        noise = rng.integers(0, 256, (ROWS, 300), dtype=np.uint8)
        table = pa.table(
            {
                "id": ids,
                "text": [f"doc {i}" for i in ids],
                "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb), 8),
                "noise": pa.array([r.tobytes() for r in noise], pa.binary()),
            }
        )
        path = root / f"part-{f}.parquet"
        pq.write_table(table, path, row_group_size=GROUP)
        out.append(path)
    return out


def check_head_and_rest(ds: Any, column: str, by_pages: bool) -> None:
    """Every unit of ``ds`` read in two parts at several cuts equals its whole read, and
    ``column`` comes from the page reader (``by_pages``) or from Arrow, in one chunk."""
    from shardwise.loader.read.unit_heads import unit_parts
    from shardwise.loader.read.units import UnitReader

    reader = UnitReader(ds.index)
    parts = unit_parts(ds.index, None, None, None, reader.schema)
    assert parts is not None and ds.blocks > 1
    for u in range(ds.index.num_units):
        whole, n = reader.read(u), ds.index.units[u].num_samples
        for cut in (n // ds.blocks, 1, n - 1):
            head = parts.head(u, cut)
            assert head is not None and head.equals(whole.slice(0, cut))
            assert parts._open[u].fixed == ([column] if by_pages else [])
            rest = parts.rest(u, cut, n - cut)
            assert rest is not None and rest.equals(whole.slice(cut))
            assert rest.column(column).num_chunks == 1
            assert u not in parts._open


def leases(cache: Path) -> list[str]:
    """The lease files of ``cache``'s units."""
    return os.listdir(cache / "units" / "leases")


def leases_left(cache: Path, seconds: float = 10.0) -> list[str]:
    """The lease files of ``cache``'s units once the dropped files are released: a file
    dropped by the reader is collected when Arrow's I/O thread lets go of its last
    reference, which under load can come just after the reader's own ``gc.collect``."""
    deadline = time.monotonic() + seconds
    while (left := leases(cache)) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return left
