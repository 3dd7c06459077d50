#!/usr/bin/env python
"""Footers parsed once per process: the loader's epochs on files of many row groups, this
code against ``--before`` (another checkout's ``src``), each epoch in a fresh process.

Run from ``benchmarks/``::

    PYTHONPATH=../src ../.venv/bin/python bench_footers.py --before /path/to/old/src

Each round runs ``first_epoch_phases.py loader DIR`` (torch imported first; the in-process
numpy path, default settings, two epochs) once for each side, in alternating order. The
table gives the medians of the rounds (wall s of the first batch, the first epoch with the
dataset's construction, the second epoch, and the process's CPU s over both epochs), and
before/after of the epochs' times (above 1: this code is faster) as the ratio of the
medians and as the median of the rounds' own ratios. Data shapes (generated once under
``.data/``):

- ``wide``: 2 files of 100,000 rows, 40 float32 columns, id, label and a short text, in row
  groups of 500 rows (a footer of 460 KB per file);
- ``narrow``: 4 files of 50,000 rows (id, label, text of ~400 bytes, 32 float32 as a
  fixed-size list), in row groups of 1,000 rows;
- ``tokens``: the loader benchmark's token lists at 50,000 rows (row groups of 250-2,000
  rows, 13 per file), read in head windows; ``tokens-5k``: the same at 5,000 rows (7 row
  groups, read whole).

``--before-heads`` runs the before side with ``first_window="heads"`` (``--before`` may then
be this checkout's ``src``: the default's choice of whole units against head windows).
Results go to ``results/footers-<date>.{json,md}`` (``--out`` names another stem).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DATA = HERE / ".data"
PHASES = HERE / "first_epoch_phases.py"
LINE = re.compile(
    r"^(?P<name>.+?)\s+wall\s+(?P<wall>[\d.]+) s\s+"
    r"user\s+(?P<user>[\d.]+) s\s+sys\s+(?P<sys>[\d.]+) s"
)


def _wide(out: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for f in range(2):
        n = 100_000
        cols: dict[str, Any] = {
            "id": np.arange(f * n, (f + 1) * n, dtype=np.int64),
            "label": np.sort(rng.integers(0, 10, n)),
        }
        for i in range(40):
            cols[f"x{i}"] = rng.random(n).astype(np.float32)
        cols["text"] = pa.array([f"row {j} " * 8 for j in range(n)])
        pq.write_table(pa.table(cols), out / f"part-{f}.parquet", row_group_size=500)


def _narrow(out: Path) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    for f in range(4):
        n = 50_000
        emb = rng.random((n, 32), dtype=np.float32)
        words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"])
        text = [" ".join(rng.choice(words, 70)) for _ in range(n)]
        table = pa.table(
            {
                "id": np.arange(f * n, (f + 1) * n, dtype=np.int64),
                "label": np.sort(rng.integers(0, 10, n)),
                "text": text,
                "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.reshape(-1)), 32),
            }
        )
        pq.write_table(table, out / f"part-{f}.parquet", row_group_size=1000)


def data(shape: str) -> Path:
    """The shape's directory of Parquet files, generated if missing."""
    if shape in ("tokens", "tokens-5k"):
        sys.path.insert(0, str(HERE))
        from datagen.loader_data import generate

        rows = 1_000_000 if shape == "tokens" else 100_000
        return generate(rows, shape="tokens") / "parquet"
    out = DATA / f"footers-{shape}"
    if not (out / "done").exists():
        (out / "parquet").mkdir(parents=True, exist_ok=True)
        {"wide": _wide, "narrow": _narrow}[shape](out / "parquet")
        (out / "done").write_text("1")
    return out / "parquet"


def run_once(src: str, path: Path, extra: list[str]) -> dict[str, float]:
    """One fresh process's phases (wall s, and CPU s of both epochs)."""
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(
        [sys.executable, str(PHASES), "loader", str(path), *extra],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    got: dict[str, float] = {"cpu": 0.0}
    for line in out.splitlines():
        m = LINE.match(line)
        if m is None:
            continue
        name, wall = m["name"], float(m["wall"])
        key = next(
            (
                k
                for k in ("construct", "first batch", "rest of epoch 1", "epoch 2")
                if name.startswith(k)
            ),
            None,
        )
        if key is None:
            continue
        got[key] = wall
        got["cpu"] += float(m["user"]) + float(m["sys"])
    got["epoch 1"] = got["construct"] + got["first batch"] + got["rest of epoch 1"]
    return got


def measure(
    shape: str, before: str, after: str, rounds: int, args: dict[str, list[str]]
) -> dict[str, Any]:
    path = data(shape)
    runs: dict[str, list[dict[str, float]]] = {"after": [], "before": []}
    for r in range(rounds):
        order = ["after", "before"] if r % 2 == 0 else ["before", "after"]
        for side in order:
            src = after if side == "after" else before
            runs[side].append(run_once(src, path, args[side]))
        print(f"  {shape} round {r + 1}: " + ", ".join(
            f"{s} epoch 1 {runs[s][-1]['epoch 1']:.3f} s" for s in ("after", "before")
        ), flush=True)  # fmt: skip
    med = {s: {k: statistics.median(x[k] for x in v) for k in v[0]} for s, v in runs.items()}
    own = {
        k: statistics.median(
            b[k] / a[k] for a, b in zip(runs["after"], runs["before"], strict=True)
        )
        for k in ("epoch 1", "epoch 2", "first batch")
    }
    ratios = {k: med["before"][k] / med["after"][k] for k in ("epoch 1", "epoch 2", "first batch")}
    return {
        "shape": shape,
        "path": str(path),
        "rounds": runs,
        "medians": med,
        "ratios": ratios,
        "own_ratios": own,
    }


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| shape | side | first batch s | epoch 1 s | epoch 2 s | CPU s "
        "| before/after epoch 1 (own) | epoch 2 (own) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for res in results:
        med, own = res["medians"], res["own_ratios"]
        for side in ("after", "before"):
            m = med[side]
            ratio = ["", ""]
            if side == "after":
                ratio = [
                    f"{med['before'][k] / m[k]:.2f}x ({own[k]:.2f}x)"
                    for k in ("epoch 1", "epoch 2")
                ]
            rows.append(
                f"| {res['shape']} | {side} | {m['first batch']:.3f} | {m['epoch 1']:.3f} | "
                f"{m['epoch 2']:.3f} | {m['cpu']:.2f} | {ratio[0]} | {ratio[1]} |"
            )
    return "\n".join(rows)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the src directory of the code before")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--shape", nargs="+", default=["wide", "narrow", "tokens"])
    ap.add_argument("--out", default=None, help="results file stem (default footers-<date>)")
    ap.add_argument(
        "--before-heads",
        action="store_true",
        help="the before side with first_window='heads' (--before may then be this src)",
    )
    args = ap.parse_args(argv)
    after = str(HERE.parent / "src")
    started = dt.datetime.now(dt.UTC)
    load = os.getloadavg()
    extra = {"before": ["--heads"] if args.before_heads else [], "after": []}
    results = [measure(s, args.before, after, args.rounds, extra) for s in args.shape]
    md = table(results)
    print(md)
    stem = args.out or f"footers-{started.date().isoformat()}"
    meta = {
        "started_utc": started.isoformat(timespec="seconds"),
        "load_start": load,
        "load_end": os.getloadavg(),
        "before": args.before,
        "before_heads": args.before_heads,
        "rounds": args.rounds,
        "results": results,
    }
    (HERE / "results" / f"{stem}.json").write_text(json.dumps(meta, indent=1))
    (HERE / "results" / f"{stem}.md").write_text(
        f"# Loader epochs, before and after ({meta['started_utc']}, load "
        f"{load[0]:.1f} -> {meta['load_end'][0]:.1f}, {args.rounds} rounds)\n\n{md}\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
