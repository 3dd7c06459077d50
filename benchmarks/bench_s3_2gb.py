#!/usr/bin/env python
"""Benchmark streaming 2.5 GB from S3: shardwise's node cache against the download limit,
local disk, WebDataset, LitData and MosaicML streaming, with an I/O- and a CPU-bound consumer.

Run from the repository root (serialize benchmarks on a shared machine)::

    flock /tmp/shardwise-bench.lock .venv/bin/python benchmarks/bench_s3_2gb.py \\
        [--quick] [--only NAME,NAME] [--repeats R] [--data-dir DIR]

Data (made once into ``--data-dir``, default ``~/.cache/shardwise-bench/s3-2gb``, and reused
while its size matches): 2 GiB of WebDataset tar shards (JPEG-sized incompressible images
with labels) and 0.5 GiB of Parquet embeddings; LitData's and MosaicML's conversions of the
same rows are made once there too (their conversion times kept). A SeaweedFS S3 server on
127.0.0.1 is started (with its Prometheus counters, which give the bytes sent per bucket)
and stopped at the end, its directory removed. Every row runs in a fresh subprocess,
rounds alternated, median (of the cold epoch's rows/s) kept. Writes
``benchmarks/results/s3-2gb.json`` and ``.md`` (``s3-2gb-quick.*`` with ``--quick``,
``*-only.*`` with ``--only``: a partial run never replaces the full one).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import machine, write_json
from harness.runner import System, alternate, median_run, run_system, warm_page_cache
from harness.venvs import Venv, ensure_venv
from s3report import markdown_report, targets

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
TORCH = "torch==2.13.0"  # the local CPU wheel
VENVS = {
    "wds": Venv(
        HERE / ".venv-s3big-wds",
        (TORCH, "webdataset", "boto3", "pillow", "psutil", "numpy"),
        {"webdataset": "webdataset", "torch": "torch", "boto3": "boto3", "pillow": "PIL"},
    ),
    "litdata": Venv(
        HERE / ".venv-s3big-litdata",
        (TORCH, "litdata", "numpy", "pyarrow", "boto3", "psutil", "pillow"),
        {"litdata": "litdata", "torch": "torch", "boto3": "boto3", "pillow": "PIL"},
    ),
    # --no-deps: its declared dependencies pull every cloud SDK; torchvision is a stand-in
    # (adapters/torchvision_stub.py): no CPU torchvision matches the local torch wheel
    "mosaic": Venv(
        HERE / ".venv-s3big-mosaic",
        (
            *(TORCH, "numpy<2.2", "tqdm", "xxhash>=3,<4", "zstd", "brotli", "python-snappy"),
            *("boto3", "pillow", "psutil", "pyarrow", "catalogue", "transformers>=4.21.3,<5"),
        ),
        {"mosaicml-streaming": "streaming", "torch": "torch", "boto3": "boto3", "pillow": "PIL"},
        no_deps=("mosaicml-streaming",),
    ),
}
DATASETS = ("tars", "parquet")
CONSUMERS = ("bytes", "cpu")
# (row, target, env, kind, datasets, consumers)
ROWS = [
    ("shardwise_local", "adapters.s3_big:shardwise_local", "main", "local disk", DATASETS),
    ("shardwise_s3", "adapters.s3_big:shardwise_s3", "main", "S3 + node cache", DATASETS),
    ("limit", "adapters.s3_big:limit", "main", "ranged GETs, dropped", DATASETS),
    ("page_fill", "adapters.s3_big:page_fill", "main", "page-cache fill alone", DATASETS),
    ("webdataset", "adapters.s3_big_peers:wds_read", "wds", "S3 stream (tars)", ("tars",)),
    ("litdata", "adapters.s3_big_peers:litdata_read", "litdata", "S3 (its chunks)", DATASETS),
    ("mosaic", "adapters.s3_big_peers:mosaic_read", "mosaic", "S3 (MDS)", DATASETS),
    ("consumer", "adapters.s3_big:consumer_alone", "main", "the consumer alone", ("tars",)),
]
PEERS = ("webdataset", "litdata", "mosaic")
BUCKETS = {
    "shardwise": {"tars": "sw-tars", "parquet": "sw-parquet"},
    "litdata": {"tars": "lit-tars", "parquet": "lit-parquet"},
    "mosaic": {"tars": "mds-tars", "parquet": "mds-parquet"},
}


def _consumers(row: str, dataset: str) -> tuple[str, ...]:
    """The limit and the page-cache fill have no consumer; the embeddings only the I/O-bound
    one."""
    return ("bytes",) if row in ("limit", "page_fill") or dataset == "parquet" else CONSUMERS


def systems() -> dict[str, System]:
    """Every measured row, named ``<dataset>.<row>.<consumer>``."""
    out: dict[str, System] = {}
    for row, target, env, kind, datasets in ROWS:
        for d in datasets:
            for c in _consumers(row, d):
                kw = (("dataset", d), ("consumer", c))
                out[f"{d}.{row}.{c}"] = System(f"{d}.{row}.{c}", target, env, kind, kw)
    return out


def convert_systems() -> dict[str, System]:
    """The peers' conversions, ``<peer>_convert.<dataset>``."""
    return {
        f"{p}_convert.{d}": System(
            f"{p}_convert.{d}", f"adapters.s3_big_peers:{p}_convert", p, kwargs=(("dataset", d),)
        )
        for p in ("litdata", "mosaic")
        for d in DATASETS
    }


SYSTEMS = systems()


def ready_venvs(names: list[str]) -> tuple[list[str], dict[str, Any]]:
    """``names`` whose peer venv works (made on first use), and the peers' versions."""
    versions: dict[str, Any] = {}
    for key in sorted({SYSTEMS[n].env for n in names} - {"main"}):
        got, err = ensure_venv(VENVS[key])
        if key == "mosaic" and err:
            from adapters.torchvision_stub import install

            install(next(VENVS[key].path.glob("lib/python*/site-packages")))
            got, err = ensure_venv(VENVS[key])
        versions[key] = got or err
        print(f"{key}: {err or got}", flush=True)
        if got is None:
            names = [n for n in names if SYSTEMS[n].env != key]
    return names, versions


def start_server(workdir: str) -> tuple[Any, dict[str, Any], Any]:
    """SeaweedFS on 127.0.0.1 with a metrics port; returns (process, s3 info, log)."""
    sys.path.insert(0, str(ROOT / "tests" / "support"))
    from _s3server import free_ports, start_weed, wait_ready

    key, secret = "bench-key", "bench-secret-" + uuid.uuid4().hex[:8]
    metrics = free_ports(1, set())[0]
    extra = (f"-metricsPort={metrics}", "-metricsIp=127.0.0.1")
    proc, ports, log = start_weed(workdir, key, secret, extra_args=extra)
    wait_ready(proc, workdir, ports, key, secret)
    info = {
        "endpoint": f"http://127.0.0.1:{ports['s3']}",
        "key": key,
        "secret": secret,
        "metrics": f"http://127.0.0.1:{metrics}/metrics",
        "pid": proc.pid,
        "buckets": BUCKETS,
        "ports": ports,
    }
    return proc, info, log


def upload(s3: dict[str, Any], local: Path, bucket: str, files: list[Path]) -> int:
    """Copy ``files`` (under ``local``) into ``bucket``, 4 at a time; returns their bytes."""
    import s3fs

    fs = s3fs.S3FileSystem(
        key=s3["key"], secret=s3["secret"], client_kwargs={"endpoint_url": s3["endpoint"]}
    )
    fs.mkdir(bucket)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda f: fs.put_file(str(f), f"{bucket}/{f.relative_to(local)}"), files))
    return sum(f.stat().st_size for f in files)


def convert(peer: str, dataset: str, data: Path, logdir: Path) -> dict[str, Any]:
    """The peer's format of ``data`` (made once under ``data/conv``, its time kept)."""
    import json

    out = data / "conv" / peer
    done = out / "convert.json"
    if done.exists():
        return dict(json.loads(done.read_text()), reused=True)
    shutil.rmtree(out, ignore_errors=True)
    r = run_system(
        Path(__file__).resolve(),
        convert_systems()[f"{peer}_convert.{dataset}"],
        str(VENVS[peer].python),
        timeout=3600,
        logdir=logdir,
        worker_kwargs={"data": str(data), "out": str(out / "files")},
    )
    if "error" not in r:
        done.write_text(json.dumps(r))
        print(f" {r['convert_s']:.1f} s", flush=True)
    return r


def prepare(args: Any, names: list[str]) -> dict[str, Any]:
    """The data sets (and the peers' conversions the chosen rows need)."""
    from datagen.s3_data import generate

    size = {"tars": args.tar_bytes, "parquet": args.parquet_bytes}
    root = Path(args.data_dir).expanduser()
    logdir = root / "logs"
    logdir.mkdir(parents=True, exist_ok=True)
    out: dict[str, Any] = {"root": root, "logdir": logdir, "data": {}, "conversions": {}}
    for d in DATASETS:
        if any(n.startswith(d + ".") for n in names):
            out["data"][d] = generate(root, d, size[d])
            for peer in ("litdata", "mosaic"):
                if f"{d}.{peer}.bytes" in names or f"{d}.{peer}.cpu" in names:
                    out["conversions"][f"{peer}.{d}"] = convert(peer, d, out["data"][d], logdir)
    return out


def load(s3: dict[str, Any], prep: dict[str, Any]) -> dict[str, int]:
    """Upload every data set and conversion to its bucket; bytes per bucket."""
    from datagen.s3_data import data_files

    sizes: dict[str, int] = {}
    for d, path in prep["data"].items():
        files = data_files(path / "files")
        sizes[BUCKETS["shardwise"][d]] = upload(s3, path / "files", BUCKETS["shardwise"][d], files)
        for peer in ("litdata", "mosaic"):
            conv = path / "conv" / peer / "files"
            if f"{peer}.{d}" in prep["conversions"] and conv.exists():
                every = sorted(p for p in conv.rglob("*") if p.is_file())
                sizes[BUCKETS[peer][d]] = upload(s3, conv, BUCKETS[peer][d], every)
        warm_page_cache(files)
    print(f"uploaded {sum(sizes.values()) / 2**30:.2f} GiB to {s3['endpoint']}", flush=True)
    return sizes


def measure(names: list[str], prep: dict[str, Any], s3: dict[str, Any], args: Any) -> Any:
    """Every chosen row, ``--repeats`` alternated rounds; the median (cold rows/s) of each."""
    import json

    info = {k: v for k, v in s3.items() if k != "ports"}
    done: dict[str, list[dict[str, Any]]] = {}

    def once(name: str) -> dict[str, Any]:
        sysm = SYSTEMS[name]
        py = sys.executable if sysm.env == "main" else str(VENVS[sysm.env].python)
        data = prep["data"][dict(sysm.kwargs)["dataset"]]
        r = run_system(
            Path(__file__).resolve(),
            sysm,
            py,
            timeout=args.timeout,
            logdir=prep["logdir"],
            idle_wait=args.idle_wait,
            worker_kwargs={"data": str(data), "s3": info},
            scratch=Path(args.scratch),
        )
        r["kind"] = sysm.kind
        if "error" not in r:
            r["cold_rows_per_s"] = r["cold"]["rows_per_s"]
            warm = f", warm {r['warm']['rows_per_s']:,.0f}" if "warm" in r else ""
            print(f" cold {r['cold_rows_per_s']:,.0f} rows/s{warm}", flush=True)
        done.setdefault(name, []).append(r)  # every run so far, in case the run stops early
        (prep["logdir"] / "runs-so-far.json").write_text(json.dumps(done, indent=1))
        return r

    runs = alternate(names, args.repeats, once)
    return {n: epoch_medians(runs[n]) for n in names}


def epoch_medians(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The row's median run by its cold epoch's rows/s, with the warm epoch of its median
    run by the warm epoch's rows/s: each epoch's figures from the run whose rate for that
    epoch is the median (a run's warm epoch does not follow from its cold one's rank)."""
    best = median_run(runs, "cold_rows_per_s", higher_is_better=True)
    warm = [dict(r, warm_rows_per_s=r["warm"]["rows_per_s"]) for r in runs if "warm" in r]
    if warm and "error" not in best:
        mid = median_run(warm, "warm_rows_per_s", higher_is_better=True)
        best["warm"] = dict(mid["warm"], rows_per_s=mid["warm_rows_per_s"])
        best["runs_warm_rows_per_s"] = mid["runs_warm_rows_per_s"]
    return best


def _parser() -> Any:
    ap = base_parser(__doc__, "256 MiB of tars and 64 MiB of Parquet, one round")
    ap.add_argument("--data-dir", default="~/.cache/shardwise-bench/s3-2gb")
    ap.add_argument("--tar-bytes", type=int, help="bytes of tar shards (default 2 GiB)")
    ap.add_argument("--parquet-bytes", type=int, help="bytes of Parquet (default 0.5 GiB)")
    ap.add_argument("--scratch", default="/tmp", help="where runs' caches and the server live")
    return ap


def main(argv: list[str]) -> int:
    ap = _parser()
    args = ap.parse_args(argv)
    worker = maybe_worker(args, SYSTEMS | convert_systems())
    if worker is not None:
        return worker
    args.tar_bytes = args.tar_bytes or (2**28 if args.quick else 2 * 2**30)
    args.parquet_bytes = args.parquet_bytes or (2**26 if args.quick else 2**29)
    args.repeats = args.repeats or (1 if args.quick else 2)
    args.timeout = args.timeout or 1800.0
    args.idle_wait = args.idle_wait if args.idle_wait is not None else 0.0
    names, versions = ready_venvs(chosen(ap, args.only, list(SYSTEMS)))
    prep = prepare(args, names)
    workdir = tempfile.mkdtemp(prefix="swbench-weed-", dir=args.scratch)
    proc, s3, log = start_server(workdir)
    try:
        sizes = load(s3, prep)
        results = measure(names, prep, s3, args)
    finally:
        from _s3server import remove_weed_files, stop_weed

        stop_weed(proc)
        log.close()
        remove_weed_files(workdir, s3["ports"])
    return report(args, prep, sizes, results, versions)


def report(
    args: Any,
    prep: dict[str, Any],
    sizes: dict[str, int],
    results: dict[str, Any],
    versions: dict[str, Any],
) -> int:
    """Print the tables and targets; write the JSON and markdown results."""
    import json

    meta = {d: json.loads((p / "meta.json").read_text()) for d, p in prep["data"].items()}
    checks = targets(results, meta)
    import time

    payload = {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "data": meta,
        "bucket_bytes": sizes,
        "machine": machine(),
        "peer_versions": versions,
        "repeats": args.repeats,
        "statistic": "each epoch from its median run by that epoch's rows/s, rounds alternated",
        "conversions": {
            k: {**v, "reused": v.get("reused", False)} for k, v in prep["conversions"].items()
        },
        "results": results,
        "checks": checks.data,
        "check_lines": checks.lines,
    }
    text = markdown_report(payload)
    print("\n" + text)
    # a run of some rows (--only) does not replace the full run's results
    stem = "s3-2gb" + ("-quick" if args.quick else "") + ("-only" if args.only else "")
    write_json(HERE / "results" / f"{stem}.json", payload, ROOT)
    (HERE / "results" / f"{stem}.md").write_text(text + "\n")
    return 0 if all("error" not in r for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
