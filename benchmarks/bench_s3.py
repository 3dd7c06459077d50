#!/usr/bin/env python
"""Benchmark streaming from S3 through shardwise's node cache, against local disk and peers.

Run from the repository root::

    .venv/bin/python benchmarks/bench_s3.py [--quick] [--only NAME,NAME] [--repeats R]

Starts a SeaweedFS S3 server on 127.0.0.1 (stopped at the end), uploads the loader
benchmark's Parquet rows, converts them to MosaicML streaming's MDS and LitData's chunks
(in their own virtualenvs; conversion time reported apart) and uploads those too. Every
reader then runs a cold and a warm epoch through a 2-worker DataLoader with a fresh cache,
rounds alternated, median kept. Writes ``benchmarks/results/s3.json`` (``s3-quick.json``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import Checks, fmt, machine, markdown, ratio, write_json
from harness.runner import System, alternate, median_run, run_system
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TORCH = "torch==2.13.0"  # pinned: an unpinned install may pull the CUDA build
VENVS = {
    # what mosaicml-streaming imports (installed --no-deps: its declared dependencies pull
    # every cloud SDK); torchvision forces the torch it was built for
    "mosaic": Venv(
        HERE / ".venv-s3-mosaic",
        (
            "torch==2.15.0",
            "torchvision==0.29.2",
            "numpy>=1.21.5,<2.2",
            "pyarrow",
            "boto3",
            "tqdm",
            "xxhash>=3,<4",
            "zstd",
            "brotli",
            "python-snappy",
            "pillow",
            "catalogue",
            "transformers>=4.21.3,<5",
            "psutil",
        ),
        {"mosaicml-streaming": "streaming", "torch": "torch", "boto3": "boto3"},
        no_deps=("mosaicml-streaming",),
    ),
    "litdata": Venv(
        HERE / ".venv-s3-litdata",
        (TORCH, "litdata", "numpy", "pyarrow", "boto3", "psutil"),
        {"litdata": "litdata", "torch": "torch", "boto3": "boto3"},
    ),
}
SYSTEMS = {
    s.name: s
    for s in [
        System("shardwise_local", "adapters.s3_loaders:shardwise_local", kind="local disk"),
        System("shardwise_s3", "adapters.s3_loaders:shardwise_s3", kind="S3 + node cache"),
        System(
            "mosaic_streaming", "adapters.s3_loaders:mosaic_read", env="mosaic", kind="S3 (MDS)"
        ),
        System(
            "litdata", "adapters.s3_loaders:litdata_read", env="litdata", kind="S3 (litdata chunks)"
        ),
        System(
            "shardwise_two_jobs", "adapters.s3_loaders:shardwise_two_jobs", kind="2 jobs, 1 cache"
        ),
    ]
}
CONVERT = {
    "mosaic_streaming": ("mosaic", "adapters.s3_loaders:mosaic_convert", "mds"),
    "litdata": ("litdata", "adapters.s3_loaders:litdata_convert", "litdata"),
}
PEERS = ("mosaic_streaming", "litdata")


def start_server(workdir: str) -> tuple[Any, dict[str, Any], Any]:
    """SeaweedFS on 127.0.0.1 (the test suite's launcher); returns (process, s3 info, log)."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from _s3server import start_weed, wait_ready

    key, secret = "bench-key", "bench-secret-" + uuid.uuid4().hex[:8]
    proc, ports, log = start_weed(workdir, key, secret)
    wait_ready(proc, workdir, ports, key, secret)
    return (
        proc,
        {
            "endpoint": f"http://127.0.0.1:{ports['s3']}",
            "key": key,
            "secret": secret,
            "bucket": "bench",
            "ports": ports,
        },
        log,
    )


def upload(s3: dict[str, Any], local: Path, prefix: str) -> int:
    """Copy a directory tree into ``bucket/prefix``; returns its bytes."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=s3["key"], secret=s3["secret"], client_kwargs={"endpoint_url": s3["endpoint"]}
    )
    if not fs.exists(s3["bucket"]):
        fs.mkdir(s3["bucket"])
    total = 0
    for f in sorted(p for p in local.rglob("*") if p.is_file() and not p.name.startswith(".")):
        fs.put(str(f), f"{s3['bucket']}/{prefix}/{f.relative_to(local)}")
        total += f.stat().st_size
    return total


def convert(
    names: list[str], data: Path, s3: dict[str, Any], logdir: Path, scratch: Path
) -> dict[str, Any]:
    """Each chosen peer writes its own format (timed) in its venv; then it is uploaded."""
    out: dict[str, Any] = {}
    for name in names:
        if name not in CONVERT:
            continue
        env, target, prefix = CONVERT[name]
        dest = scratch / prefix
        r = run_system(
            Path(__file__).resolve(),
            System(f"{name}_convert", target, env=env),
            str(VENVS[env].python),
            timeout=3600,
            logdir=logdir,
            worker_kwargs={"data": str(data), "out": str(dest)},
        )
        if "error" not in r:
            r["bytes"] = upload(s3, dest, prefix)
            print(f" {r['convert_s']:.1f} s, {r['bytes'] / 2**20:.0f} MB", flush=True)
        out[name] = r
    return out


def table(results: dict[str, dict[str, Any]], parquet_bytes: int) -> str:
    """Cold and warm rows/s, ratios to local disk, bytes fetched per epoch."""
    local = results.get("shardwise_local", {})
    rows: list[list[Any]] = []
    for name, r in results.items():
        if "error" in r:
            rows.append([name, SYSTEMS[name].kind, f"failed: {r['error'][:70]}"])
            continue
        if name == "shardwise_two_jobs":
            rows.append(
                [
                    name,
                    SYSTEMS[name].kind,
                    f"{r['rows_per_s']:,.0f} (sum of both jobs' cold epochs)",
                    "",
                    "",
                    "",
                    f"{r['fetched_bytes'] / 2**20:,.1f} MB "
                    f"({r['fetched_bytes'] / parquet_bytes:.2f} of data)",
                    "",
                    "",
                ]
            )
            continue
        mb = [
            fmt(r.get(f"{e}_fetched_bytes", None) and r[f"{e}_fetched_bytes"] / 2**20, ",.1f")
            if f"{e}_fetched_bytes" in r
            else "-"
            for e in ("cold", "warm")
        ]
        rows.append(
            [
                name,
                SYSTEMS[name].kind,
                f"{r['cold_rows_per_s']:,.0f}",
                f"{r['warm_rows_per_s']:,.0f}",
                f"{fmt(ratio(r['cold_rows_per_s'], local.get('cold_rows_per_s')), '.2f')}x",
                f"{fmt(ratio(r['warm_rows_per_s'], local.get('warm_rows_per_s')), '.2f')}x",
                mb[0],
                mb[1],
                fmt(r.get("setup_s"), ".1f"),
            ]
        )
    return markdown(
        [
            "system",
            "reads",
            "cold rows/s",
            "warm rows/s",
            "cold vs local",
            "warm vs local",
            "MB fetched cold",
            "MB fetched warm",
            "set-up s",
        ],
        rows,
        right=range(2, 9),
    )


def targets(results: dict[str, dict[str, Any]], parquet_bytes: int) -> Checks:
    """The issue's targets, all from rows of this run."""
    ok = {k: v for k, v in results.items() if "error" not in v}
    local, s3 = ok.get("shardwise_local"), ok.get("shardwise_s3")
    checks = Checks()
    if local and s3:
        checks.add(
            "S3 cold vs local cold", ratio(s3["cold_rows_per_s"], local["cold_rows_per_s"]), 0.5
        )
        checks.add(
            "S3 warm vs local warm", ratio(s3["warm_rows_per_s"], local["warm_rows_per_s"]), 0.9
        )
    if s3:
        checks.add(
            "bytes fetched, cold epoch / Parquet bytes",
            s3["cold_fetched_bytes"] / parquet_bytes,
            1.0,
            at_most=True,
            spec=".3f",
        )
        checks.add(
            "bytes fetched, warm epoch",
            s3["warm_fetched_bytes"],
            0,
            at_most=True,
            spec=",.0f",
            unit=" B",
        )
    two = ok.get("shardwise_two_jobs")
    if two:
        checks.add(
            "two concurrent jobs: bytes fetched / Parquet bytes",
            two["fetched_bytes"] / parquet_bytes,
            1.0,
            at_most=True,
            spec=".3f",
        )
    for epoch in ("cold", "warm"):
        peers = [v for k, v in ok.items() if k in PEERS]
        best = max(peers, key=lambda v: v[f"{epoch}_rows_per_s"], default=None)
        if s3 and best:
            checks.add(
                f"shardwise S3 {epoch} vs faster peer",
                ratio(s3[f"{epoch}_rows_per_s"], best[f"{epoch}_rows_per_s"]),
                1.5,
                vs=best["name"],
            )
    return checks


def measure(
    names: list[str], data: Path, s3: dict[str, Any], args: Any, logdir: Path
) -> dict[str, dict[str, Any]]:
    info = {k: v for k, v in s3.items() if k != "ports"}

    def once(name: str) -> dict[str, Any]:
        sysm = SYSTEMS[name]
        py = sys.executable if sysm.env == "main" else str(VENVS[sysm.env].python)
        r = run_system(
            Path(__file__).resolve(),
            sysm,
            py,
            timeout=args.timeout,
            logdir=logdir,
            idle_wait=args.idle_wait,
            worker_kwargs={"data": str(data), "s3": info},
        )
        if "error" not in r and "cold_rows_per_s" in r:
            print(
                f" cold {r['cold_rows_per_s']:,.0f} rows/s,"
                f" warm {r['warm_rows_per_s']:,.0f} rows/s",
                flush=True,
            )
        elif "error" not in r:
            print(
                f" {r['rows_per_s']:,.0f} rows/s, fetched {r['fetched_bytes'] / 2**20:.1f} MB",
                flush=True,
            )
        return r

    runs = alternate(names, args.repeats, once)
    key = {n: "rows_per_s" if n == "shardwise_two_jobs" else "cold_rows_per_s" for n in names}
    return {n: median_run(runs[n], key[n], higher_is_better=True) for n in names}


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "20,000 rows instead of 50,000, one round instead of three")
    ap.add_argument("--rows", type=int, help="rows of the data set (overrides --quick)")
    args = ap.parse_args(argv)
    worker = maybe_worker(
        args,
        SYSTEMS
        | {f"{n}_convert": System(f"{n}_convert", t, env=e) for n, (e, t, _) in CONVERT.items()},
    )
    if worker is not None:
        return worker
    import json

    from datagen.loader_data import generate

    rows = args.rows or (20_000 if args.quick else 50_000)
    names = chosen(ap, args.only, list(SYSTEMS))
    args.timeout = args.timeout or 1800.0
    args.idle_wait = args.idle_wait if args.idle_wait is not None else 0.0
    args.repeats = args.repeats or (1 if args.quick else 3)
    data = generate(rows)
    meta = json.loads((data / "meta.json").read_text())
    versions: dict[str, Any] = {}
    for name in [n for n in names if n in PEERS]:
        env = SYSTEMS[name].env
        got, err = ensure_venv(VENVS[env])
        versions[name] = got or err
        print(f"{name}: {err or got}", flush=True)
        if got is None:
            names.remove(name)
    logdir = data / "logs-s3"
    logdir.mkdir(exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="swbench-weed", dir="/tmp")
    scratch = Path(tempfile.mkdtemp(prefix="swbench-s3-"))
    proc, s3, log = start_server(workdir)
    try:
        parquet_bytes = upload(s3, data / "parquet", "parquet")
        print(
            f"S3 server at {s3['endpoint']}; uploaded {parquet_bytes / 2**20:.0f} MB of Parquet",
            flush=True,
        )
        conversions = convert(names, data, s3, logdir, scratch)
        results = measure(names, data, s3, args, logdir)
    finally:
        from _s3server import remove_weed_files, stop_weed

        stop_weed(proc)
        log.close()
        remove_weed_files(workdir, s3["ports"])
        shutil.rmtree(scratch, ignore_errors=True)
    print(
        f"\n### S3 benchmark: {rows:,} rows ({parquet_bytes / 2**20:.0f} MB Parquet, "
        f"{meta['row_groups']} row "
        f"groups), batch 256, 2 DataLoader workers, {args.repeats} round(s), median\n\n"
        f"{table(results, parquet_bytes)}\n"
    )
    for name, c in conversions.items():
        print(
            f"conversion to {name}'s format: {fmt(c.get('convert_s'), '.1f')} s"
            f"{'' if 'error' not in c else ' FAILED: ' + c['error']} (not in any row above)"
        )
    checks = targets(results, parquet_bytes)
    checks.print()
    out = (
        HERE
        / "results"
        / (
            "s3.json"
            if rows == 50_000
            else "s3-quick.json"
            if rows == 20_000
            else f"s3-{rows}.json"
        )
    )
    write_json(
        out,
        {
            "rows": rows,
            "parquet_bytes": parquet_bytes,
            "machine": machine(),
            "peer_versions": versions,
            "repeats": args.repeats,
            "statistic": "median (cold rows/s), rounds alternated",
            "conversions": conversions,
            "results": results,
            "table": table(results, parquet_bytes),
            "checks": checks.data,
            "check_lines": checks.lines,
        },
        ROOT,
    )
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
