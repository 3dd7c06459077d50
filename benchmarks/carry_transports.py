#!/usr/bin/env python
"""How a DataLoader worker's batch of binary values reaches the training process: a
binary column of ``--rows`` values of ``--size`` bytes, made once per worker and sent
``--batches`` times through a 2-worker DataLoader, by each transport:

- ``pickle``: the ``pyarrow.RecordBatch`` pickled down the DataLoader's pipe (before);
- ``tensor``: its bytes copied into a uint8 tensor (plus an offsets tensor), which torch
  sends as shared memory (one segment and one file-descriptor handoff per tensor), viewed
  as an Arrow array on arrival (no copy);
- ``tensor_shm``: the same, the tensor allocated in shared memory directly (one copy less);
- ``ring``: shardwise's carriage (the worker's ``memfd`` ring; one copy in, one copy out).

Run from the repository root (serialize benchmarks on a shared machine)::

    flock /tmp/shardwise-bench.lock .venv/bin/python benchmarks/carry_transports.py [--rounds 3]

Every run is a fresh process; rounds alternate the transports; medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

MODES = ("pickle", "tensor", "tensor_shm", "ring")


class _Carrier:
    """Tensors of a batch's bytes and offsets (torch sends them as shared memory)."""

    def __init__(self, data: Any, offsets: Any) -> None:
        self.data, self.offsets = data, offsets


def _batch(rows: int, size: int) -> Any:
    import numpy as np
    import pyarrow as pa

    payload = np.random.default_rng(0).integers(0, 255, rows * size, dtype=np.uint8)
    offsets = np.arange(rows + 1, dtype=np.int32) * size
    arr = pa.Array.from_buffers(
        pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(payload)]
    )
    return pa.record_batch([arr], names=["jpg"])


def _sent(rb: Any, mode: str) -> Any:
    """What the worker yields for ``rb`` under ``mode``."""
    import numpy as np
    import torch

    if mode in ("pickle", "ring"):
        return rb
    col = rb.column(0)
    data = np.frombuffer(col.buffers()[2], np.uint8)
    if mode == "tensor":
        t = torch.empty(data.size, dtype=torch.uint8)
    else:
        t = torch.empty(0, dtype=torch.uint8).set_(torch.UntypedStorage._new_shared(data.size))
    t.numpy()[:] = data
    offsets = np.frombuffer(col.buffers()[1], np.int32, len(col) + 1)
    return _Carrier(t, torch.from_numpy(offsets.copy()))


def _arrived(item: Any) -> int:
    """The bytes of an arrived batch (an Arrow view of a carrier's tensors)."""
    import pyarrow as pa

    if isinstance(item, _Carrier):
        bufs = [None, pa.py_buffer(item.offsets.numpy()), pa.py_buffer(item.data.numpy())]
        arr = pa.Array.from_buffers(pa.binary(), len(item.offsets) - 1, bufs)
        return int(arr.buffers()[2].size)
    return int(item.column(0).buffers()[2].size)


def run(mode: str, rows: int, size: int, batches: int) -> dict[str, Any]:
    """One epoch of ``batches`` batches through a 2-worker DataLoader."""
    from torch.utils.data import DataLoader, IterableDataset, get_worker_info

    class Batches(IterableDataset[Any]):
        def __iter__(self) -> Any:
            if mode == "ring":
                from shardwise.loader.workers.carriers import enable

                enable()
            rb = _batch(rows, size)
            info = get_worker_info()
            for _ in range(batches // (info.num_workers if info else 1)):
                yield _sent(rb, mode)

    t0 = time.perf_counter()
    got = sum(_arrived(b) for b in DataLoader(Batches(), batch_size=None, num_workers=2))
    seconds = time.perf_counter() - t0
    return {"bytes": got, "seconds": seconds, "mb_per_s": got / seconds / 1e6}


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--size", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--mode", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.mode:
        print(json.dumps(run(args.mode, args.rows, args.size, args.batches)))
        return 0
    runs: dict[str, list[float]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for m in MODES:
            cmd = [sys.executable, __file__, "--mode", m, "--rows", str(args.rows)]
            cmd += ["--size", str(args.size), "--batches", str(args.batches)]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=True)
            got = json.loads(out.stdout.splitlines()[-1])
            runs[m].append(got["mb_per_s"])
            print(f"round {r} {m:10s} {got['mb_per_s']:7.0f} MB/s", flush=True)
    print(f"\nmedians, load average {os.getloadavg()[0]:.1f}")
    for m, v in runs.items():
        print(f"{m:10s} {statistics.median(v):7.0f} MB/s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
