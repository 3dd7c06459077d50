#!/usr/bin/env python
"""Benchmark mixing sources: planning at scale, and how exact the realised proportions are.

Run from the repository root::

    .venv/bin/python benchmarks/bench_mix.py [--quick] [--only NAME ...] [--repeats R]

Rows (each a measured subprocess; see ``benchmarks/README.md``):

* ``shardwise-random`` / ``shardwise-stratified``: ``make_plan`` of one epoch of three
  sources (weights 0.5/0.3/0.2 over 50/30/20 % of the units) for 4,096 ranks x 8 workers,
  batch 32, on 10^9 samples in 10^6 units (``--quick``: 10^7 in 10^4, 256 ranks); then one
  worker's whole plan, and an exact resume at mid-epoch; peak RSS of the process.
* ``shardwise-elastic``: the same, resumed on half the ranks with twice the batch.
* ``mosaic``: MosaicML streaming's planning on the same sizes (per-stream sample choice,
  ``get_shuffle``, ``get_partitions``) under a 6 GiB address-space cap (peer venv).
* ``proportions-random`` / ``proportions-stratified``: the realised share of every source
  per epoch and per global batch (8 ranks x 2 workers x 32, 2x10^5 samples in 2,000 units).

Writes ``benchmarks/results/mix.json`` (``mix-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import Checks, fmt, machine, markdown, ratio, write_json
from harness.runner import System, alternate, median_run, run_system
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# what mosaicml-streaming 0.13 imports at `import streaming` (it imports transformers, torchvision, PIL...)
PEERS = Venv(HERE / ".venv-mosaic", ("torch", "torchvision", "mosaicml-streaming", "numpy<2.2", "xxhash<4",
                                     "transformers", "brotli", "pillow", "catalogue", "psutil"),
             {"mosaicml-streaming": "streaming", "psutil": "psutil"})
SCALE = {"units": 10**6, "samples": 10**9, "ranks": 4096, "workers": 8, "batch": 32}
QUICK = {"units": 10**4, "samples": 10**7, "ranks": 256, "workers": 8, "batch": 32}
SMALL = {"units": 2000, "samples": 200_000, "ranks": 8, "workers": 2, "batch": 32}

SYSTEMS = {s.name: s for s in [
    System("shardwise-random", "adapters.shardwise_mix:plan_at_scale", "main", "plan", (("batching", "random"),)),
    System("shardwise-stratified", "adapters.shardwise_mix:plan_at_scale", "main", "plan",
           (("batching", "stratified"),)),
    System("shardwise-elastic", "adapters.shardwise_mix:plan_at_scale", "main", "plan",
           (("batching", "random"), ("elastic", True))),
    System("mosaic", "adapters.mosaic_mix:plan_at_scale", "mosaic", "plan"),
    System("proportions-random", "adapters.shardwise_mix:proportions", "main", "share", (("batching", "random"),)),
    System("proportions-stratified", "adapters.shardwise_mix:proportions", "main", "share",
           (("batching", "stratified"),)),
]}


def _plan_rows(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, r in results.items():
        if SYSTEMS[name].kind != "plan":
            continue
        if "error" in r or "plan_error" in r:
            rows.append([name, f"failed: {(r.get('error') or r.get('plan_error'))[:90]}"])
            continue
        rows.append([name, f"{r['plan_s']:.2f}", fmt(r.get("worker_s"), ".2f"), fmt(r.get("resume_s"), ".2f"),
                     fmt(r.get("total_s", r["plan_s"]), ".2f"), f"{r['peak_rss_mb']:,.0f}",
                     "/".join(f"{x:.1f}" for x in r.get("runs_total_s", []))])
    return markdown(["system", "plan s", "one worker s", "resume s", "total s", "peak RSS MB", "runs total s"], rows,
                    right=range(1, 6))


def _share_rows(results: dict[str, dict[str, Any]]) -> str:
    rows = [[n, "/".join(f"{x:.4f}" for x in r["epoch_shares"]), f"{r['epoch_max_dev']:.4f}",
             f"{r['batch_mean_dev']:.4f}", f"{r['batch_max_dev']:.4f}", r["global_batches"]]
            for n, r in results.items() if SYSTEMS[n].kind == "share" and "error" not in r]
    return markdown(["system", "epoch shares (0.5/0.3/0.2)", "epoch max dev", "batch mean dev", "batch max dev",
                     "global batches"], rows, right=range(2, 6))


def targets(results: dict[str, dict[str, Any]]) -> Checks:
    checks = Checks()
    for name in ("shardwise-random", "shardwise-stratified", "shardwise-elastic"):
        r = results.get(name, {})
        if "error" not in r and r:
            checks.add(f"{name}: plan + one worker + resume", r["total_s"], 10.0, unit=" s", at_most=True)
            checks.add(f"{name}: peak RSS", r["peak_rss_mb"] / 1024, 2.0, unit=" GB", at_most=True)
    mosaic = results.get("mosaic", {})
    ours = results.get("shardwise-random", {})
    if mosaic and ours and "error" not in ours:
        ok = "error" not in mosaic and "plan_error" not in mosaic
        checks.add("mosaic plan time / shardwise-random plan+worker+resume",
                   ratio(mosaic.get("plan_s") if ok else None, ours.get("total_s")), 1.5, vs="mosaic")
    return checks


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "10^7 samples in 10^4 units on 256 ranks x 8 workers, one round")
    args = ap.parse_args(argv)
    worker = maybe_worker(args, SYSTEMS)
    if worker is not None:
        return worker
    names = chosen(ap, args.only, list(SYSTEMS))
    size = QUICK if args.quick else SCALE
    repeats = args.repeats or (1 if args.quick else 3)
    versions: dict[str, str] | None = {}
    if "mosaic" in names:
        versions, err = ensure_venv(PEERS)
        print("mosaic venv:", err or versions, flush=True)
    logdir = HERE / ".data" / "mix-logs"
    logdir.mkdir(parents=True, exist_ok=True)

    def once(name: str) -> dict[str, Any]:
        system = SYSTEMS[name]
        py = sys.executable if system.env == "main" else str(PEERS.python)
        kwargs = SMALL if system.kind == "share" else size
        r = run_system(Path(__file__).resolve(), system, py, timeout=args.timeout or 1800.0, logdir=logdir,
                       idle_wait=args.idle_wait or 0.0, worker_kwargs=dict(kwargs))
        print(f" {r.get('total_s', r.get('plan_s', 0)):.2f} s" if "error" not in r else "", flush=True)
        return r

    runs = alternate(names, repeats, once)
    results = {n: median_run(runs[n], "total_s" if SYSTEMS[n].kind == "plan" and n != "mosaic" else
                             "plan_s" if n == "mosaic" else "batch_mean_dev") for n in names}
    head = f"{size['samples']:,} samples in {size['units']:,} units, {size['ranks']:,} ranks x {size['workers']} workers"
    text = f"planning ({head}, batch {size['batch']}; median of {repeats})\n\n{_plan_rows(results)}\n\n" \
           f"realised proportions ({SMALL['samples']:,} samples, {SMALL['ranks']} ranks x {SMALL['workers']} " \
           f"workers x {SMALL['batch']})\n\n{_share_rows(results)}"
    print("\n" + text + "\n")
    checks = targets(results)
    checks.print()
    out = HERE / "results" / ("mix-quick.json" if args.quick else "mix.json")
    write_json(out, {"benchmark": "mix", "quick": args.quick, "size": size, "shares_size": SMALL,
                     "repeats": repeats, "machine": machine(), "peer_versions": versions, "results": results,
                     "all_runs": runs, "checks": checks.data, "table": text, "check_lines": checks.lines}, ROOT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
