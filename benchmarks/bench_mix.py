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
* ``stream-shardwise-{random,stratified}-{dl,inproc}`` / ``stream-mosaic-{random,stratified}-dl``:
  one epoch of the same three mixed sources (Parquet; converted once to MDS for Mosaic,
  timed apart) through 2 DataLoader workers (shardwise also in the process): rows/s, CPU s,
  peak RSS, realised shares per epoch and per batch (``adapters/mix_stream.py``).

Writes ``benchmarks/results/mix.json`` (``mix-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adapters import mix_stream
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import Checks, fmt, machine, markdown, ratio, write_json
from harness.runner import System, alternate, median_run, run_system
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# what mosaicml-streaming 0.13 imports at `import streaming` (it imports transformers, torchvision,
# PIL...)
PEERS = Venv(
    HERE / ".venv-mosaic",
    (
        "torch",
        "torchvision",
        "mosaicml-streaming",
        "numpy<2.2",
        "xxhash<4",
        "transformers",
        "brotli",
        "pillow",
        "catalogue",
        "psutil",
    ),
    {"mosaicml-streaming": "streaming", "psutil": "psutil"},
)
SCALE = {"units": 10**6, "samples": 10**9, "ranks": 4096, "workers": 8, "batch": 32}
QUICK = {"units": 10**4, "samples": 10**7, "ranks": 256, "workers": 8, "batch": 32}
SMALL = {"units": 2000, "samples": 200_000, "ranks": 8, "workers": 2, "batch": 32}

SYSTEMS = {
    s.name: s
    for s in [
        System(
            "shardwise-random",
            "adapters.shardwise_mix:plan_at_scale",
            "main",
            "plan",
            (("batching", "random"),),
        ),
        System(
            "shardwise-stratified",
            "adapters.shardwise_mix:plan_at_scale",
            "main",
            "plan",
            (("batching", "stratified"),),
        ),
        System(
            "shardwise-elastic",
            "adapters.shardwise_mix:plan_at_scale",
            "main",
            "plan",
            (("batching", "random"), ("elastic", True)),
        ),
        System("mosaic", "adapters.mosaic_mix:plan_at_scale", "mosaic", "plan"),
        System(
            "proportions-random",
            "adapters.shardwise_mix:proportions",
            "main",
            "share",
            (("batching", "random"),),
        ),
        System(
            "proportions-stratified",
            "adapters.shardwise_mix:proportions",
            "main",
            "share",
            (("batching", "stratified"),),
        ),
        *[
            System(
                f"stream-shardwise-{b}-{'dl' if w else 'inproc'}",
                "adapters.mix_stream:shardwise_epoch",
                "main",
                "stream",
                (("batching", b), ("workers", w)),
            )
            for b in ("random", "stratified")
            for w in (2, 0)
        ],
        *[
            System(
                f"stream-mosaic-{b}-dl",
                "adapters.mix_stream:mosaic_epoch",
                "mosaic",
                "stream",
                (("batching", b), ("workers", 2)),
            )
            for b in ("random", "stratified")
        ],
    ]
}
CONVERT = System("mosaic-convert", "adapters.mix_stream:convert_mds", "mosaic", "convert")


def _plan_rows(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for name, r in results.items():
        if SYSTEMS[name].kind != "plan":
            continue
        if "error" in r or "plan_error" in r:
            rows.append([name, f"failed: {(r.get('error') or r.get('plan_error'))[:90]}"])
            continue
        rows.append(
            [
                name,
                f"{r['plan_s']:.2f}",
                fmt(r.get("worker_s"), ".2f"),
                fmt(r.get("resume_s"), ".2f"),
                fmt(r.get("total_s", r["plan_s"]), ".2f"),
                f"{r['peak_rss_mb']:,.0f}",
                "/".join(f"{x:.1f}" for x in r.get("runs_total_s", [])),
            ]
        )
    return markdown(
        ["system", "plan s", "one worker s", "resume s", "total s", "peak RSS MB", "runs total s"],
        rows,
        right=range(1, 6),
    )


def _share_rows(results: dict[str, dict[str, Any]]) -> str:
    rows = [
        [
            n,
            "/".join(f"{x:.4f}" for x in r["epoch_shares"]),
            f"{r['epoch_max_dev']:.4f}",
            f"{r['batch_mean_dev']:.4f}",
            f"{r['batch_max_dev']:.4f}",
            r["global_batches"],
        ]
        for n, r in results.items()
        if SYSTEMS[n].kind == "share" and "error" not in r
    ]
    return markdown(
        [
            "system",
            "epoch shares (0.5/0.3/0.2)",
            "epoch max dev",
            "batch mean dev",
            "batch max dev",
            "global batches",
        ],
        rows,
        right=range(2, 6),
    )


def _median_key(name: str) -> str:
    kind = SYSTEMS[name].kind
    if kind == "stream":
        return "rows_per_s"
    if kind == "share":
        return "batch_mean_dev"
    return "plan_s" if name == "mosaic" else "total_s"


def stream_head(quick: bool) -> str:
    n, epoch = mix_stream.sizes(quick)
    return (
        f"sources of {'/'.join(f'{x:,}' for x in n)} rows, weights "
        f"{'/'.join(map(str, mix_stream.WEIGHTS))}, "
        f"epoch {epoch:,}, batch {mix_stream.BATCH}, payload {mix_stream.PAYLOAD} B"
    )


def _prepare_stream_data(root: Path, quick: bool, convert: Any) -> dict[str, Any]:
    """The Parquet sources (written once) and their MDS conversion (once, timed)."""
    done = root / "convert.json"
    if done.exists():
        return dict(json.loads(done.read_text()))
    shutil.rmtree(root, ignore_errors=True)
    mix_stream.write_parquet(root, quick)
    r = convert()
    if "error" not in r:
        done.write_text(json.dumps(r))
    return dict(r)


def _stream_rows(results: dict[str, dict[str, Any]]) -> str:
    rows = []
    for n, r in results.items():
        if SYSTEMS[n].kind != "stream":
            continue
        if "error" in r:
            rows.append([n, f"failed: {r['error'][:90]}"])
            continue
        rows.append(
            [
                n,
                f"{r['rows_per_s']:,.0f}",
                f"{r['epoch_s']:.2f}",
                f"{r['cpu_s']:.1f}",
                f"{r['peak_rss_mb']:,.0f}",
                "/".join(f"{x:.4f}" for x in r["epoch_shares"]),
                f"{r['epoch_max_dev']:.4f}",
                f"{r['batch_mean_dev']:.4f}",
                f"{r['batch_max_dev']:.4f}",
                "/".join(f"{x:,.0f}" for x in r.get("runs_rows_per_s", [])),
            ]
        )
    return markdown(
        [
            "system",
            "rows/s",
            "epoch s",
            "CPU s",
            "peak RSS MB",
            "epoch shares",
            "epoch max dev",
            "batch mean dev",
            "batch max dev",
            "runs rows/s",
        ],
        rows,
        right=range(1, 9),
    )


def _stream_targets(results: dict[str, dict[str, Any]], checks: Checks) -> None:
    for b in ("random", "stratified"):
        ours, theirs = (
            results.get(f"stream-shardwise-{b}-dl", {}),
            results.get(f"stream-mosaic-{b}-dl", {}),
        )
        if not ours or not theirs or "error" in ours:
            continue
        ok = "error" not in theirs
        checks.add(
            f"{b}: shardwise / mosaic rows/s (2 DataLoader workers)",
            ratio(ours["rows_per_s"], theirs["rows_per_s"] if ok else None),
            1.5,
            vs="mosaic",
        )
        inproc = results.get(f"stream-shardwise-{b}-inproc", {})
        if inproc and "error" not in inproc:
            checks.add(
                f"{b}: shardwise in-process / mosaic rows/s",
                ratio(inproc["rows_per_s"], theirs["rows_per_s"] if ok else None),
                1.5,
                vs="mosaic",
            )
        for key in ("batch_mean_dev", "epoch_max_dev"):
            checks.add(
                f"{b}: shardwise {key} (mosaic {fmt(theirs.get(key), '.4f')})",
                ours[key],
                theirs.get(key) if ok else None,
                at_most=True,
                spec=".4f",
                unit="",
            )


def targets(results: dict[str, dict[str, Any]]) -> Checks:
    checks = Checks()
    for name in ("shardwise-random", "shardwise-stratified", "shardwise-elastic"):
        r = results.get(name, {})
        if "error" not in r and r:
            checks.add(
                f"{name}: plan + one worker + resume", r["total_s"], 10.0, unit=" s", at_most=True
            )
            checks.add(f"{name}: peak RSS", r["peak_rss_mb"] / 1024, 2.0, unit=" GB", at_most=True)
    mosaic = results.get("mosaic", {})
    ours = results.get("shardwise-random", {})
    if mosaic and ours and "error" not in ours:
        ok = "error" not in mosaic and "plan_error" not in mosaic
        checks.add(
            "mosaic plan time / shardwise-random plan+worker+resume",
            ratio(mosaic.get("plan_s") if ok else None, ours.get("total_s")),
            1.5,
            vs="mosaic",
        )
    _stream_targets(results, checks)
    return checks


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "10^7 samples in 10^4 units on 256 ranks x 8 workers, one round")
    args = ap.parse_args(argv)
    worker = maybe_worker(args, SYSTEMS | {CONVERT.name: CONVERT})
    if worker is not None:
        return worker
    names = chosen(ap, args.only, list(SYSTEMS))
    size = QUICK if args.quick else SCALE
    repeats = args.repeats or (1 if args.quick else 3)
    versions: dict[str, str] | None = {}
    if any(SYSTEMS[n].env == "mosaic" for n in names):
        versions, err = ensure_venv(PEERS)
        print("mosaic venv:", err or versions, flush=True)
    logdir = HERE / ".data" / "mix-logs"
    logdir.mkdir(parents=True, exist_ok=True)

    stream_data = HERE / ".data" / ("mix-stream-quick" if args.quick else "mix-stream")
    stream_kwargs = {"data": str(stream_data), "quick": args.quick}

    def once(name: str, system: System | None = None) -> dict[str, Any]:
        system = system or SYSTEMS[name]
        py = sys.executable if system.env == "main" else str(PEERS.python)
        kwargs = (
            SMALL
            if system.kind == "share"
            else stream_kwargs
            if system.kind in ("stream", "convert")
            else size
        )
        r = run_system(
            Path(__file__).resolve(),
            system,
            py,
            timeout=args.timeout or 1800.0,
            logdir=logdir,
            idle_wait=args.idle_wait or 0.0,
            worker_kwargs=dict(kwargs),
        )
        shown = r.get("rows_per_s", r.get("convert_s", r.get("total_s", r.get("plan_s", 0))))
        print(f" {shown:,.2f}" if "error" not in r else "", flush=True)
        return r

    convert = (
        _prepare_stream_data(stream_data, args.quick, lambda: once(CONVERT.name, CONVERT))
        if any(SYSTEMS[n].kind == "stream" for n in names)
        else None
    )
    runs = alternate(names, repeats, once)
    results = {
        n: median_run(runs[n], _median_key(n), higher_is_better=SYSTEMS[n].kind == "stream")
        for n in names
    }
    head = (
        f"{size['samples']:,} samples in {size['units']:,} units, {size['ranks']:,} ranks x "
        f"{size['workers']} workers"
    )
    text = (
        f"planning ({head}, batch {size['batch']}; median of "
        f"{repeats})\n\n{_plan_rows(results)}\n\n"
        f"realised proportions ({SMALL['samples']:,} samples, {SMALL['ranks']} ranks x "
        f"{SMALL['workers']} workers x {SMALL['batch']})\n\n{_share_rows(results)}"
    )
    if convert is not None:
        text += (
            f"\n\nstreaming the same mixed data ({stream_head(args.quick)}; median of {repeats}; "
            f"Parquet to MDS conversion {fmt(convert.get('convert_s'), '.1f')} s, not in any "
            f"ratio)\n\n{_stream_rows(results)}"
        )
    print("\n" + text + "\n")
    checks = targets(results)
    checks.print()
    out = HERE / "results" / ("mix-quick.json" if args.quick else "mix.json")
    write_json(
        out,
        {
            "benchmark": "mix",
            "quick": args.quick,
            "size": size,
            "shares_size": SMALL,
            "repeats": repeats,
            "stream_convert": convert,
            "machine": machine(),
            "peer_versions": versions,
            "results": results,
            "all_runs": runs,
            "checks": checks.data,
            "table": text,
            "check_lines": checks.lines,
        },
        ROOT,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
