#!/usr/bin/env python
"""Time a 2-worker DataLoader epoch over the 2 GB benchmark's local WebDataset tars (about
100 KB JPEG-sized payloads), in every batch format, for two sources of shardwise: how much
the workers' shared-memory carriage of binary values changes the DataLoader path.

Run from the repository root (serialize benchmarks on a shared machine)::

    flock /tmp/shardwise-bench.lock .venv/bin/python benchmarks/bench_carry.py \\
        --before /path/to/other/src [--rounds 3] [--formats numpy,arrow,torch,samples]

``--before`` is a ``src`` directory of another shardwise (e.g. ``git archive`` of the base
commit); the "after" rows use this checkout's ``src``, or ``--after``'s. The tars are those of
``bench_s3_2gb.py`` (``--data-dir``, default ``~/.cache/shardwise-bench/s3-2gb``; made by
it). Every epoch runs in a fresh process, rounds alternated; medians are printed. The
consumer touches every 4 KiB page of each payload (``bench_s3_2gb.py``'s ``bytes``
consumer); batches of 64 rows, 2 workers, ``prefetch_factor=4``, columns
``__key__, jpg, cls``; ``samples`` is ``batch_format=None`` collated by the DataLoader.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
BATCH, WORKERS, PREFETCH, PAGE = 64, 2, 4, 4096
FORMATS = {"numpy": "numpy", "arrow": "arrow", "torch": "torch", "samples": None}


def _payload(batch: Any, fmt: str | None) -> list[Any]:
    """The batch's JPEG payloads, as buffers."""
    import numpy as np

    if fmt == "arrow":
        col = batch.column("jpg")
        offsets = np.frombuffer(col.buffers()[1], np.int32, len(col) + 1, col.offset * 4)
        data = np.frombuffer(col.buffers()[2], np.uint8)
        return [data[a:b] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    return list(batch["jpg"])


def epoch(files: str, name: str) -> dict[str, Any]:
    """One epoch in this process; its rows, payload bytes, seconds and first batch."""
    import numpy as np
    import torch
    from torch.utils.data import DataLoader

    from shardwise import StreamingDataset

    fmt = FORMATS[name]
    t0 = time.perf_counter()
    ds = StreamingDataset(
        files, batch_size=BATCH, seed=0, columns=["__key__", "jpg", "cls"], batch_format=fmt
    )
    loader = DataLoader(
        ds,
        batch_size=None if fmt else BATCH,
        num_workers=WORKERS,
        prefetch_factor=PREFETCH,
    )
    t1 = time.perf_counter()
    rows = nbytes = touched = 0
    first = None
    cpu0 = _cpu()
    for batch in loader:
        first = first or time.perf_counter() - t1
        for b in _payload(batch, fmt):
            touched += int(np.frombuffer(b, np.uint8)[::PAGE].sum()) & 1
            nbytes += len(b)
            rows += 1
    seconds = time.perf_counter() - t1
    assert torch is not None
    return {
        "rows": rows,
        "bytes": nbytes,
        "seconds": seconds,
        "setup_s": t1 - t0,
        "first_batch_s": first,
        "mb_per_s": nbytes / seconds / 1e6,
        "cpu_s": _cpu() - cpu0,
    }


def _cpu() -> float:
    """CPU seconds of this process and its finished children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _run(src: str, files: str, name: str) -> dict[str, Any]:
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(
        [sys.executable, __file__, "--worker", name, "--files", files],
        env=env,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    if out.returncode:
        return {"error": out.stderr[-2000:]}
    return dict(json.loads(out.stdout.splitlines()[-1]))


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs if key in r)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--before", help="src directory of the shardwise to compare with")
    ap.add_argument("--after", default=str(SRC), help="src directory (default: this checkout's)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--data-dir", default="~/.cache/shardwise-bench/s3-2gb")
    ap.add_argument("--worker")
    ap.add_argument("--files")
    args = ap.parse_args(argv)
    if args.worker:
        print(json.dumps(epoch(args.files, args.worker)))
        return 0
    files = str(next(Path(args.data_dir).expanduser().glob("tars-*")) / "files")
    sources = {"after": args.after} | ({"before": args.before} if args.before else {})
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in range(args.rounds):
        for name in args.formats.split(","):
            for label, src in sources.items():
                got = _run(src, files, name)
                runs.setdefault((name, label), []).append(got)
                print(f"round {r} {name:8s} {label:6s} {_line(got)}", flush=True)
    _report(runs, list(sources))
    return 0


def _line(r: dict[str, Any]) -> str:
    if "error" in r:
        return "ERROR " + r["error"].splitlines()[-1]
    return (
        f"{r['mb_per_s']:7.0f} MB/s {r['rows'] / r['seconds']:6.0f} rows/s "
        f"{r['seconds']:5.2f} s cpu {r['cpu_s']:5.2f} s first {r['first_batch_s']:.2f} s"
    )


def _report(runs: dict[tuple[str, str], list[dict[str, Any]]], labels: list[str]) -> None:
    print(f"\nmedians, load average {os.getloadavg()[0]:.1f}")
    for (name, label), rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            continue
        mbs, sec = _median(ok, "mb_per_s"), _median(ok, "seconds")
        ratio = ""
        if label == "after" and (name, "before") in runs:
            before = [r for r in runs[(name, "before")] if "error" not in r]
            ratio = f"  {mbs / _median(before, 'mb_per_s'):.2f}x before" if before else ""
        rows = ok[0]["rows"]
        print(f"{name:8s} {label:6s} {mbs:7.0f} MB/s  {sec:5.2f} s  {rows} rows{ratio}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
