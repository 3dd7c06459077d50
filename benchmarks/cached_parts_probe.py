#!/usr/bin/env python
"""Head windows on Parquet read through the node cache from S3: reads per unit and CPU.

With ``first_window="heads"`` every unit is read in two parts. Before
:mod:`shardwise.loader.read.cached_parts`, a unit served by the node cache was leased,
read and decoded whole for its head and again for its rest; now its head's read keeps the
leased entries and the row group open for the rest. This probe streams the S3 benchmark's
Parquet shape (``id``, ``label``, ``emb`` ``fixed_size_list<float32>[768]``, row groups of
4,096 rows, uncompressed; ``--mb`` of it) from a SeaweedFS server on 127.0.0.1 through a
fresh node cache: a cold epoch, then a warm one, in a fresh subprocess per row, rounds
alternated. ``before`` makes the loader take the old path (whole reads sliced, no rest
kept: :mod:`shardwise.loader.batches.kept_rests` off).

Per epoch it prints the whole-unit reads per unit (``UnitReader`` reads), the cache's
downloads and hits, the CPU seconds of the process and its DataLoader
workers (user + system), the wall time and the peak RSS (of the process; with workers, of
the largest worker). Downloads and hits are the entries (footers, column chunks) of this
process's cache (with 0 workers); ``after`` counts a hit for each entry it downloads,
where it takes the entry on disk in place of the downloaded bytes. Run from the
repository root, serialized::

    flock /tmp/shardwise-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/cached_parts_probe.py [--mb 256] [--rounds 2] [--workers 0] [--all-columns]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
COLUMNS = ["id", "label", "emb"]


def make_data(out: Path, mb: int) -> None:
    """``mb`` MiB of the S3 benchmark's Parquet shape in files of 64 MiB."""
    sys.path.insert(0, str(HERE))
    from datagen.s3_data import _write_parquet

    _write_parquet(out, mb * 2**20, seed=0)


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One row in this process: a cold and a warm epoch through a fresh cache."""
    import torch  # noqa: F401  (imported before the clock)

    from shardwise import StreamingDataset
    from shardwise.loader.batches import heads, kept_rests
    from shardwise.loader.read.unit_heads import unit_parts
    from shardwise.loader.read.units import UnitReader

    if spec["mode"] == "before":  # the old path: whole reads sliced, each twice
        heads.part_reader = unit_parts  # type: ignore[assignment]  (None with a cache)
        kept_rests.SHARE = 0.0
    reads: list[int] = []
    read = UnitReader._read

    def counted(self: Any, unit_id: int, quarantine: Any) -> Any:
        reads.append(unit_id)
        return read(self, unit_id, quarantine)

    UnitReader._read = counted  # type: ignore[method-assign]
    ds = StreamingDataset(
        spec["url"],
        storage_options=spec["options"],
        cache_dir=spec["cache"],
        cache_bytes=16 * 2**30,
        batch_size=256,
        seed=0,
        columns=spec["columns"],
        batch_format="numpy",
        first_window="heads",
        num_workers=spec["workers"],
        progress=False,
    )
    out = {"units": ds.index.num_units, "blocks": ds.blocks, "epochs": []}
    for epoch in range(2):
        out["epochs"].append(_epoch(ds, epoch, spec["workers"], reads))
    shutil.rmtree(spec["cache"], ignore_errors=True)
    return out


def _epoch(ds: Any, epoch: int, workers: int, reads: list[int]) -> dict[str, Any]:
    ds.set_epoch(epoch)
    stats = ds.cache.stats
    down0, hits0, reads0 = stats.downloads, stats.hits, len(reads)
    r0s, r0c = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    t0 = time.perf_counter()
    rows = 0
    if workers:
        from torch.utils.data import DataLoader

        batches: Any = DataLoader(ds, batch_size=None, num_workers=workers, prefetch_factor=4)
    else:
        batches = ds
    for b in batches:
        rows += len(b["label"])
    wall = time.perf_counter() - t0
    r1s, r1c = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    cpu = sum(
        getattr(b, k) - getattr(a, k)
        for a, b in ((r0s, r1s), (r0c, r1c))
        for k in ("ru_utime", "ru_stime")
    )
    return {
        "rows": rows,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "whole_reads": len(reads) - reads0,  # in this process (0 workers) only
        "downloads": stats.downloads - down0,  # entries (footers, chunks), this process
        "hits": stats.hits - hits0,
        "peak_rss_mb": round(max(r1s.ru_maxrss, r1c.ru_maxrss) / 1024, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--mb", type=int, default=256, help="MiB of Parquet (default 256)")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workers", type=int, default=0, help="DataLoader workers (0: in-process)")
    ap.add_argument("--all-columns", action="store_true", help="no projection (whole ranges)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    sys.path.insert(0, str(HERE.parent / "tests" / "support"))
    from _s3server import remove_weed_files, start_weed, stop_weed, wait_ready

    work = tempfile.mkdtemp(prefix="swprobe-", dir="/tmp")
    key, secret = "probe", "probe-" + uuid.uuid4().hex[:8]
    proc, ports, log = start_weed(work, key, secret)
    try:
        wait_ready(proc, work, ports, key, secret)
        options = {
            "key": key,
            "secret": secret,
            "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{ports['s3']}"},
        }
        url = _upload(work, options, args.mb)
        for r in range(args.rounds):
            for mode in ("before", "after") if r % 2 == 0 else ("after", "before"):
                spec = {
                    "mode": mode,
                    "url": url,
                    "options": options,
                    "cache": os.path.join(work, f"cache-{mode}-{r}"),
                    "columns": None if args.all_columns else COLUMNS,
                    "workers": args.workers,
                }
                res = subprocess.run(
                    [sys.executable, __file__, "--child", json.dumps(spec)],
                    check=True,
                    capture_output=True,
                    text=True,
                )
                got = json.loads(res.stdout.strip().splitlines()[-1])
                print(json.dumps({"round": r, "mode": mode, **got}), flush=True)
    finally:
        stop_weed(proc)
        log.close()
        remove_weed_files(work, ports)


def _upload(work: str, options: dict[str, Any], mb: int) -> str:
    import s3fs

    local = Path(work) / "local"
    make_data(local, mb)
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir("probe")
    for p in sorted(local.iterdir()):
        fs.put(str(p), f"probe/pq/{p.name}")
    shutil.rmtree(local)
    return "s3://probe/pq"


if __name__ == "__main__":
    main()
