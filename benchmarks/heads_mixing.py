#!/usr/bin/env python
"""Mean batch TVD of the loader's epoch on the loader benchmark's label-sorted shapes, by
``first_window`` setting or by head windows' ``k`` (the figures behind the default
``first_window="auto"``'s rule, ``results/loader-default-heads-2026-11-28.md``).

For each shape's data (made by ``bench_loader.py --rows 100000``, or here), iterates
``StreamingDataset(batch_size=256, batch_format="numpy", seed=0)`` in process, reading the
label column only, and prints the mean over batches of ``0.5 * sum |batch label mix -
global mix|`` (as ``bench_loader`` measures it), with ``--k`` also the mean over the
epoch's first ``1/k`` batches (the head window's)::

    PYTHONPATH=src .venv/bin/python benchmarks/heads_mixing.py --settings None heads auto
    PYTHONPATH=src .venv/bin/python benchmarks/heads_mixing.py --k 2 4 8 16
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
SHAPES = ("text", "emb", "tokens", "images")


def _tvds(root: Path, first_window: str | None) -> tuple[int, list[float]]:
    import numpy as np

    from shardwise.loader import StreamingDataset

    meta = json.loads((root / "meta.json").read_text())
    p = np.asarray(meta["label_hist"], dtype=np.float64)
    p /= p.sum()
    ds = StreamingDataset(
        str(root / "parquet"),
        batch_size=256,
        columns=["label"],
        batch_format="numpy",
        seed=0,
        first_window=first_window,
        progress=False,
    )
    out = []
    for b in ds:
        labels = np.asarray(b["label"]).astype(np.int64)
        q = np.bincount(labels, minlength=len(p))[: len(p)] / len(labels)
        out.append(0.5 * float(np.abs(q - p).sum()))
    return ds.blocks, out


def _forced(k: int) -> Any:
    import shardwise.loader.planner as planner

    planner.auto_blocks = lambda counts, topology: k  # type: ignore[assignment]


def main() -> None:
    from datagen.loader_data import generate

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--shape", nargs="+", default=list(SHAPES))
    ap.add_argument("--settings", nargs="*", default=["None", "heads", "auto"])
    ap.add_argument("--k", nargs="*", type=int, default=[])
    args = ap.parse_args()
    for shape in args.shape:
        root = generate(args.rows, shape=shape)
        cells = []
        if args.k:
            for k in args.k:
                _forced(k)
                _, tv = _tvds(root, "heads")
                head = tv[: max(len(tv) // k, 1)]
                cells.append(f"k={k}: {sum(tv) / len(tv):.3f} (heads {sum(head) / len(head):.3f})")
        else:
            for setting in args.settings:
                blocks, tv = _tvds(root, None if setting == "None" else setting)
                cells.append(f"{setting} (k={blocks}): {sum(tv) / len(tv):.3f}")
        print(f"{shape}: " + " | ".join(cells), flush=True)


if __name__ == "__main__":
    main()
