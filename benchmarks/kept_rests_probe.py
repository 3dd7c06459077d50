#!/usr/bin/env python
"""Head windows on data read whole for a head (tar shards, JSONL, Parquet under a filter):
the rest kept from the head's read, or read again; peak memory against the loader's bound.

Rows, each one epoch in a fresh subprocess (in-process path, numpy batches of 256, 64 for
tars, JSONL in byte ranges of 8 MiB, torch imported first), rounds alternated:

- ``whole``: no head windows (``first_window=None``);
- ``twice``: head windows, every unit read whole for its head and again for its rest
  (:data:`shardwise.loader.batches.kept_rests.SHARE` set to 0);
- ``kept``: head windows, the rest kept from the head's read (the default).

Printed per row: whole-unit reads, the epoch's CPU seconds (user + system) and wall time,
and the peak RSS over the RSS before the epoch (sampled every 2 ms), against the bound
``shuffle_bytes + prefetch_bytes`` + 30% (128 and 64 MiB unless given). Local files
under ``--data-dir`` (made once)::

    flock /tmp/shardwise-bench.lock env PYTHONPATH=src .venv/bin/python \\
        benchmarks/kept_rests_probe.py [--shape tars|jsonl|filter] [--mb 256] [--rounds 2] \\
        [--shuffle-mb 128] [--prefetch-mb 64]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

SHUFFLE, PREFETCH = 128 * 2**20, 64 * 2**20


def make_data(root: Path, shape: str, mb: int) -> Path:
    """``mb`` MiB of ``shape`` under ``root`` (reused when there)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardwise.formats import get_format

    out = root / f"{shape}-{mb}"
    if out.is_dir():
        return out
    tmp = root / f"{shape}-{mb}.tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    if shape == "tars":  # ~100 KB incompressible payloads and a label, shards of 16 MiB
        writer = get_format("webdataset").open_writer(str(tmp / "s"), target_shard_bytes=16 << 20)
        n = mb * 2**20 // 100_000
        for lo in range(0, n, 64):
            rows = range(lo, min(n, lo + 64))
            jpg = [rng.bytes(int(rng.integers(90_000, 110_000))) for _ in rows]
            cls = [str(i % 1000).encode() for i in rows]
            keys = [f"{i:08d}" for i in rows]
            writer.write(pa.record_batch({"__key__": keys, "jpg": jpg, "cls": cls}))
        writer.close()
    else:  # texts of ~400 bytes, labels, 32 float32: JSONL, or Parquet read under a filter
        n = mb * 2**20 // 560
        ids = np.arange(n)
        words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta"])
        text = [" ".join(rng.choice(words, 64)) for _ in range(n)]
        emb = rng.standard_normal((n, 32), dtype=np.float32)
        table = pa.table(
            {
                "id": ids,
                "label": ids % 10,
                "text": text,
                "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 32),
            }
        )
        if shape == "jsonl":
            writer = get_format("jsonl").open_writer(str(tmp / "s"), target_shard_bytes=64 << 20)
            for b in table.drop_columns(["emb"]).to_batches(65_536):
                writer.write(b)
            writer.close()
        else:
            for f in range(4):
                part = table.slice(f * n // 4, n // 4)
                pq.write_table(part, tmp / f"p{f}.parquet", row_group_size=50_000)
    tmp.rename(out)
    return out


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One epoch of one row in this process."""
    import pyarrow.compute as pc
    import torch  # noqa: F401  (imported before the clock)

    from shardwise import StreamingDataset
    from shardwise.loader.batches import kept_rests
    from shardwise.loader.read.units import UnitReader

    reads = [0]
    read = UnitReader._read

    def counted(self: Any, unit_id: int, quarantine: Any) -> Any:
        reads[0] += 1
        return read(self, unit_id, quarantine)

    UnitReader._read = counted  # type: ignore[method-assign]
    if spec["mode"] == "twice":
        kept_rests.SHARE = 0.0
    kw: dict[str, Any] = {}
    if spec["shape"] == "filter":
        kw["filter"] = pc.field("label") != 3
    if spec["shape"] == "jsonl":
        kw["unit_bytes"] = 8 << 20  # byte ranges of 8 MiB: 16 units in 128 MiB
    ds = StreamingDataset(
        spec["data"],
        batch_size=64 if spec["shape"] == "tars" else 256,  # the S3 bench's sizes
        seed=0,
        batch_format="numpy",
        first_window=None if spec["mode"] == "whole" else "heads",
        shuffle_bytes=spec["shuffle"],
        prefetch_bytes=spec["prefetch"],
        progress=False,
        **kw,
    )
    base = _rss()
    peak, stop = [base], threading.Event()

    def sample() -> None:
        while not stop.wait(0.002):
            peak[0] = max(peak[0], _rss())

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    rows = sum(len(b["id" if "id" in b else "cls"]) for b in ds)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF)
    stop.set()
    sampler.join()
    return {
        "units": ds.index.num_units,
        "blocks": ds.blocks,
        "interleave": ds.interleave,
        "rows": rows,
        "whole_reads": reads[0],
        "cpu_s": round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 3),
        "wall_s": round(wall, 3),
        "peak_over_base_mb": round((peak[0] - base) / 2**20, 1),
        "bound_mb": round(1.3 * (spec["shuffle"] + spec["prefetch"]) / 2**20, 1),
    }


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shape", choices=["tars", "jsonl", "filter"], default="tars")
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--shuffle-mb", type=int, default=SHUFFLE >> 20, help="shuffle_bytes")
    ap.add_argument("--prefetch-mb", type=int, default=PREFETCH >> 20, help="prefetch_bytes")
    ap.add_argument("--data-dir", default="~/.cache/shardwise-bench/kept-rests")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    data = make_data(Path(args.data_dir).expanduser(), args.shape, args.mb)
    modes = ["whole", "twice", "kept"]
    for r in range(args.rounds):
        for mode in modes if r % 2 == 0 else modes[::-1]:
            spec = {
                "mode": mode,
                "shape": args.shape,
                "data": str(data),
                "shuffle": args.shuffle_mb << 20,
                "prefetch": args.prefetch_mb << 20,
            }
            res = subprocess.run(
                [sys.executable, __file__, "--child", json.dumps(spec)],
                check=True,
                capture_output=True,
                text=True,
            )
            got = json.loads(res.stdout.strip().splitlines()[-1])
            print(json.dumps({"round": r, "mode": mode, "shape": args.shape, **got}), flush=True)


if __name__ == "__main__":
    main()
