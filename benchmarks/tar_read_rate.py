#!/usr/bin/env python
"""How fast shardwise reads WebDataset tars from local disk: the tar reader alone and the
in-process loader, MB/s and CPU seconds (the whole process's) per epoch.

Run from the repository root (one fresh process per call; serialize with other benchmarks)::

    flock /tmp/shardwise-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/tar_read_rate.py reader DIR [--epochs N]
    ... benchmarks/tar_read_rate.py loader DIR [--epochs N]
    ... benchmarks/tar_read_rate.py scan DIR [--epochs N]

``reader`` calls ``WebDatasetFormat.read_unit`` on every tar of ``DIR`` in turn (columns
``__key__``, ``jpg``, ``cls``); ``loader`` iterates a ``StreamingDataset`` over ``DIR`` in
the training process (numpy batches of 64, the same columns); ``scan`` indexes the tars
(``list_units``: every header) without the cached index. The first epoch warms the page
cache; every epoch's figures are printed.
"""

from __future__ import annotations

import argparse
import glob
import os
import time
from collections.abc import Callable

COLUMNS = ["__key__", "jpg", "cls"]


def _reader(path: str) -> Callable[[], int]:
    from shardwise.formats.webdataset import WebDatasetFormat

    files = sorted(glob.glob(os.path.join(path, "*.tar")))
    fmt = WebDatasetFormat()
    units = [u for f in files for u in fmt.list_units(f, os.path.getsize(f))]
    schemas = {f: fmt.read_schema(f) for f in files}

    def epoch() -> int:
        rows = 0
        for u in units:
            for b in fmt.read_unit(u, columns=COLUMNS, schema=schemas[u.path]):
                rows += b.num_rows
        return rows

    return epoch


def _loader(path: str) -> Callable[[], int]:
    from shardwise.loader import StreamingDataset

    ds = StreamingDataset(path, batch_size=64, seed=0, columns=COLUMNS, batch_format="numpy")

    def epoch() -> int:
        return sum(len(b["cls"]) for b in ds)

    return epoch


def _scan(path: str) -> Callable[[], int]:
    from shardwise.formats.webdataset import WebDatasetFormat

    files = sorted(glob.glob(os.path.join(path, "*.tar")))

    def epoch() -> int:
        fmt = WebDatasetFormat()
        return sum(u.num_samples for f in files for u in fmt.list_units(f, os.path.getsize(f)))

    return epoch


def main() -> None:
    """Print rows, wall s, MB/s and CPU s of each epoch."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["reader", "loader", "scan"])
    ap.add_argument("dir")
    ap.add_argument("--epochs", type=int, default=3)
    args = ap.parse_args()
    size = sum(os.path.getsize(f) for f in glob.glob(os.path.join(args.dir, "*.tar")))
    epoch = {"reader": _reader, "loader": _loader, "scan": _scan}[args.what](args.dir)
    for i in range(args.epochs):
        t, c = time.perf_counter(), time.process_time()
        rows = epoch()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        print(
            f"{args.what} epoch {i}: {rows} rows, {size / 1e9:.2f} GB, wall {wall:.2f} s, "
            f"{size / 1e6 / wall:.0f} MB/s, CPU {cpu:.2f} s, load {os.getloadavg()[0]:.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
