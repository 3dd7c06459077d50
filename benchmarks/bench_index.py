#!/usr/bin/env python
"""Benchmark indexing 10^4 and 10^5 small Parquet files on S3 behind 30 ms of latency.

Run from the repository root::

    .venv/bin/python benchmarks/bench_index.py [--quick] [--files 10000,100000]
        [--repeats R] [--repeats-large R] [--delay 0.03] [--sample 100]

Starts a SeaweedFS S3 server on 127.0.0.1 (stopped at the end) and writes each size's
files (100 rows each) straight to it, 64 PUTs in flight. A proxy in its own process
(``tests/support/_latencyproxy.py``) adds ``--delay`` seconds to every request, as a real
object store's latency does, and counts requests by method. Rows, each in a fresh worker
process, rounds alternated, median kept:

- ``cold``: ``open_dataset("s3://bench/<prefix>")`` with no saved index;
- ``warm``: the same right after (index saved beside the data, no file changed);
- ``sequential``: a loop reading one footer after another (one ranged GET each), timed
  over ``--sample`` files and scaled to all of them;
- ``limit``: each file's last 64 KiB by one ranged GET, 64 connections (aiobotocore), the
  keys known beforehand; its listing of the prefix is timed apart.

Writes ``benchmarks/results/index.json`` (``index-quick.json`` with ``--quick``,
``index-<sizes>.json`` with other ``--files``).
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import Checks, fmt, git_info, machine, markdown, ratio, write_json
from harness.runner import System, median_run, run_system

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
SUPPORT = ROOT / "tests" / "support"
SYSTEMS = {
    s.name: s
    for s in [
        System("cold", "adapters.index_scan:cold", kind="open_dataset, no saved index"),
        System("warm", "adapters.index_scan:warm", kind="open_dataset, index saved"),
        System("sequential", "adapters.index_scan:sequential", kind="one footer at a time"),
        System("limit", "adapters.index_scan:limit", kind="64 concurrent ranged GETs"),
    ]
}


def _table_bytes(i: int) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    ids = list(range(i * 100, i * 100 + 100))
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": ids, "text": [f"row {j} of the benchmark" for j in ids]}), buf)
    return buf.getvalue()


async def _put_all(s3: dict[str, Any], prefix: str, count: int) -> None:
    from aiobotocore.session import get_session
    from botocore.config import Config

    bodies = [_table_bytes(i) for i in range(256)]  # 256 distinct files, reused in turn
    session = get_session()
    async with session.create_client(
        "s3",
        endpoint_url=s3["endpoint"],
        aws_access_key_id=s3["key"],
        aws_secret_access_key=s3["secret"],
        region_name="us-east-1",
        config=Config(max_pool_connections=64),
    ) as client:
        todo = iter(range(count))

        async def worker() -> None:
            for i in todo:
                key = f"{prefix}/part-{i:06d}.parquet"
                await client.put_object(Bucket=s3["bucket"], Key=key, Body=bodies[i % 256])

        await asyncio.gather(*(worker() for _ in range(64)))


def create(s3: dict[str, Any], prefix: str, count: int) -> float:
    """Write ``count`` files under ``prefix`` (straight to the server); seconds taken."""
    t0 = time.perf_counter()
    asyncio.run(_put_all(s3, prefix, count))
    return time.perf_counter() - t0


def _direct_fs(s3: dict[str, Any]) -> Any:
    import s3fs

    return s3fs.S3FileSystem(
        key=s3["key"], secret=s3["secret"], client_kwargs={"endpoint_url": s3["endpoint"]}
    )


def start(workdir: str, delay: float) -> tuple[Any, dict[str, Any], Any, Any]:
    """SeaweedFS and the latency proxy in front of it; (weed, s3 info, log, proxy)."""
    from bench_s3 import start_server

    proc, s3, log = start_server(workdir)
    proxy = subprocess.Popen(
        [sys.executable, str(SUPPORT / "_latencyproxy.py"), s3["endpoint"], str(delay)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    s3["proxy"] = proxy.stdout.readline().strip()  # type: ignore[union-attr]
    _direct_fs(s3).mkdir(s3["bucket"])
    return proc, s3, log, proxy


def measure_size(
    n: int, s3: dict[str, Any], repeats: int, args: Any, logdir: Path
) -> dict[str, Any]:
    """Create ``n`` files, then rounds of every row (order rotated), medians kept."""
    from _latencyproxy import remote_counts

    prefix = f"n{n}"
    created = create(s3, prefix, n)
    print(f"{n:,} files written in {created:.1f} s ({n / created:,.0f} files/s)", flush=True)
    fs = _direct_fs(s3)
    keys = sorted(p.split("/", 1)[1] for p in fs.find(f"{s3['bucket']}/{prefix}"))
    keys_file = logdir / f"keys-{n}.json"
    keys_file.write_text(json.dumps(keys))
    info = {k: v for k, v in s3.items() if k != "ports"}
    kwargs = {"s3": info, "prefix": prefix, "keys_file": str(keys_file), "files": n}
    kwargs["sample"] = min(n, args.sample)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in args.systems}
    for rep in range(repeats):
        print(f"{n:,} files, round {rep + 1}/{repeats}", flush=True)
        order = args.systems[rep % len(args.systems) :] + args.systems[: rep % len(args.systems)]
        for name in order:
            if name == "cold":
                fs.rm(f"{s3['bucket']}/{prefix}/_shardwise_index.json")
            remote_counts(s3["proxy"], reset=True)
            r = run_system(
                Path(__file__).resolve(),
                SYSTEMS[name],
                sys.executable,
                timeout=args.timeout,
                logdir=logdir,
                worker_kwargs=kwargs,
            )
            r["requests"] = remote_counts(s3["proxy"])
            print(f" {fmt(r.get('seconds'), '.2f')} s, requests {r['requests']}", flush=True)
            runs[name].append(r)
    out = {name: median_run(rs, "seconds") for name, rs in runs.items()}
    out["_created_s"] = created
    return out


def table(sizes: dict[int, dict[str, Any]]) -> str:
    rows: list[list[Any]] = []
    for n, res in sizes.items():
        lim = res.get("limit", {}).get("seconds")
        for name in SYSTEMS:
            if name not in res:
                continue
            r = res[name]
            if "error" in r:
                rows.append([f"{n:,}", name, f"failed: {r['error'][:60]}"])
                continue
            req = r.get("requests", {})
            shown = ", ".join(f"{k} {v:,}" for k, v in sorted(req.items()) if k != "total")
            note = f" (scaled from {r['sample']} files)" if name == "sequential" else ""
            if name == "limit":
                note = f" (+ listing {r['list_s']:.2f} s = {r['with_list_s']:.2f} s)"
            rows.append(
                [
                    f"{n:,}",
                    name,
                    f"{r['seconds']:.2f}{note}",
                    f"{n / r['seconds']:,.0f}",
                    f"{fmt(ratio(lim, r['seconds']), '.2f')}x",
                    fmt(r.get("cpu_s"), ".1f"),
                    f"{req.get('total', 0):,} ({shown})",
                    r.get("median_of", 1),
                ]
            )
    return markdown(
        ["files", "row", "seconds", "files/s", "vs limit", "CPU s", "requests", "rounds"],
        rows,
        right=range(2, 8),
    )


def targets(sizes: dict[int, dict[str, Any]]) -> Checks:
    checks = Checks()
    for n, res in sizes.items():
        missing = {"error": "not run"}
        cold, warm = res.get("cold", missing), res.get("warm", missing)
        lim = res.get("limit", missing)
        if "error" not in cold and "error" not in lim:
            checks.add(f"{n:,} files: cold vs limit", ratio(lim["seconds"], cold["seconds"]), 0.8)
            checks.add(
                f"{n:,} files: cold vs limit with its listing",
                ratio(lim["with_list_s"], cold["seconds"]),
                0.8,
            )
        if "error" not in warm and "error" not in lim:
            req, pages = warm["requests"], lim["requests"].get("LIST", 0)
            checks.add(
                f"{n:,} files: warm listing requests (one listing of the prefix: {pages} pages)",
                req.get("LIST", 0),
                pages,
                at_most=True,
                spec=",d",
                unit="",
            )
            checks.add(
                f"{n:,} files: warm requests besides the listing (the saved index: 1)",
                req.get("total", 0) - req.get("LIST", 0),
                1,
                at_most=True,
                spec=",d",
                unit="",
            )
    return checks


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "1,000 files, one round")
    ap.add_argument("--files", help="sizes, comma-separated (default 10000,100000)")
    ap.add_argument("--repeats-large", type=int, help="rounds at 100,000 files or more")
    ap.add_argument("--delay", type=float, default=0.03, help="seconds added per request")
    ap.add_argument("--sample", type=int, default=100, help="files the sequential loop reads")
    args = ap.parse_args(argv)
    worker = maybe_worker(args, SYSTEMS)
    if worker is not None:
        return worker
    args.systems = chosen(ap, args.only, list(SYSTEMS))
    sys.path.insert(0, str(SUPPORT))
    sizes = [int(x) for x in (args.files or ("1000" if args.quick else "10000,100000")).split(",")]
    args.repeats = args.repeats or (1 if args.quick else 3)
    large = args.repeats_large or min(args.repeats, 2)
    args.timeout = args.timeout or 3600.0
    logdir = Path(tempfile.mkdtemp(prefix="swbench-index-"))
    workdir = tempfile.mkdtemp(prefix="swbench-weed", dir="/tmp")
    load_before = os.getloadavg()
    proc, s3, log, proxy = start(workdir, args.delay)
    results: dict[int, dict[str, Any]] = {}
    try:
        print(f"S3 server {s3['endpoint']}, proxy {s3['proxy']} (+{args.delay * 1000:.0f} ms)")
        for n in sizes:
            results[n] = measure_size(n, s3, large if n >= 100_000 else args.repeats, args, logdir)
    finally:
        from _s3server import remove_weed_files, stop_weed

        proxy.stdin.close()  # type: ignore[union-attr]
        proxy.wait(10)
        stop_weed(proc)
        log.close()
        remove_weed_files(workdir, s3["ports"])
    text = table(results)
    print(f"\n### Indexing small Parquet files on S3, +{args.delay * 1000:.0f} ms per request\n")
    print(text + "\n")
    checks = targets(results)
    checks.print()
    default = sizes == [10_000, 100_000]
    name = (
        "index-quick.json"
        if args.quick
        else "index.json"
        if default
        else f"index-{args.files}.json"
    )
    if args.only:  # a partial run never replaces the full results
        name = name.replace(".json", "-only.json")
    write_json(
        HERE / "results" / name,
        {
            "sizes": sizes,
            "delay_s": args.delay,
            "repeats": args.repeats,
            "repeats_large": large,
            "machine": machine(),
            "load_before": load_before,
            "git": git_info(ROOT),
            "statistic": "median seconds, rounds alternated, each row a fresh process",
            "created_s": {n: r.pop("_created_s") for n, r in results.items()},
            "results": results,
            "table": text,
            "checks": checks.data,
            "check_lines": checks.lines,
        },
        ROOT,
    )
    shutil.rmtree(logdir, ignore_errors=True)
    return 0 if all("error" not in r for res in results.values() for r in res.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
