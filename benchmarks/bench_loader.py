#!/usr/bin/env python
"""Benchmark shardwise's ``StreamingDataset`` against other training data loaders.

Run from the repository root::

    .venv/bin/python benchmarks/bench_loader.py [--quick] [--only NAME,NAME] [--repeats R]

or as ``python benchmarks/run.py loader [--quick]``. The data, the loaders and what is
measured are described in ``benchmarks/README.md``. Prints a markdown table and target
lines; writes ``benchmarks/results/loader.json`` (``loader-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adapters.loader_common import BATCH, BUFFER, WORKERS
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import (
    Checks,
    earlier_results,
    fmt,
    get,
    git_info,
    machine,
    markdown,
    ratio,
    write_json,
)
from harness.runner import System, alternate, median_run, run_system, warm_page_cache
from harness.variants import SUFFIX, base, before_after, variant_env, with_variants, worker_systems
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# torch is pinned: an unpinned install may pull the CUDA build. aiohttp: Ray Data's
# read_parquet imports fsspec's HTTP filesystem. pydantic: iter_torch_batches needs it.
PEERS = Venv(
    HERE / ".venv-peers",
    (
        "torch==2.13.0",
        "datasets",
        "webdataset",
        "ray[data]",
        "pyarrow",
        "numpy",
        "psutil",
        "aiohttp",
        "pydantic",
    ),
    {
        m: m
        for m in (
            "torch",
            "datasets",
            "webdataset",
            "ray",
            "pyarrow",
            "numpy",
            "psutil",
            "aiohttp",
            "pydantic",
        )
    },
)


def _loader(name: str, setup: str, env: str, kind: str) -> System:
    return System(name, "adapters.loader_common:epoch", env, kind, (("setup", setup),))


SYSTEMS = {
    s.name: s
    for s in [
        _loader("raw_scan", "adapters.pyarrow_scan:raw_scan", "main", "bound"),
        _loader("raw_scan_threads", "adapters.pyarrow_scan:raw_scan_threads", "main", "bound"),
        _loader("raw_scan_pages", "adapters.pyarrow_scan:raw_scan_pages", "main", "bound"),
        _loader("raw_scan_256", "adapters.pyarrow_scan:raw_scan_256", "main", "bound"),
        _loader(
            "dataloader_ceiling", "adapters.shardwise_loader:dataloader_ceiling", "main", "bound"
        ),
        _loader(
            "shardwise_first_epoch", "adapters.shardwise_loader:first_epoch", "main", "in-process"
        ),
        _loader(
            "shardwise_first_epoch_heads",
            "adapters.shardwise_loader:first_epoch_heads",
            "main",
            "in-process",
        ),
        _loader(
            "shardwise_first_epoch_whole",
            "adapters.shardwise_loader:first_epoch_whole",
            "main",
            "in-process",
        ),
        _loader(
            "shardwise_inproc_numpy", "adapters.shardwise_loader:inproc_numpy", "main", "in-process"
        ),
        _loader(
            "shardwise_inproc_torch", "adapters.shardwise_loader:inproc_torch", "main", "in-process"
        ),
        _loader(
            "shardwise_inproc_dataloader",
            "adapters.shardwise_loader:inproc_dataloader",
            "main",
            "in-process",
        ),
        _loader("raw_scan_pass2", "adapters.pyarrow_scan:raw_scan_pass2", "main", "bound"),
        _loader(
            "shardwise_inproc_numpy_epoch2",
            "adapters.shardwise_loader:inproc_numpy_epoch2",
            "main",
            "in-process",
        ),
        _loader("shardwise_batched", "adapters.shardwise_loader:batched", "main", "batched"),
        _loader(
            "shardwise_per_sample", "adapters.shardwise_loader:per_sample", "main", "per_sample"
        ),
        _loader(
            "shardwise_batched_wide", "adapters.shardwise_loader:batched_wide", "main", "batched"
        ),
        _loader("hf_streaming", "adapters.hf_datasets:streaming", "peers", "per_sample"),
        _loader("hf_map_batched", "adapters.hf_datasets:map_batched", "peers", "batched"),
        _loader("hf_map_per_sample", "adapters.hf_datasets:map_per_sample", "peers", "per_sample"),
        _loader("webdataset", "adapters.webdataset:loader", "peers", "per_sample"),
        _loader("ray_data", "adapters.ray_data:loader", "peers", "batched"),
    ]
}
INPROC = ("shardwise_inproc_numpy", "shardwise_inproc_torch", "shardwise_inproc_dataloader")
#: a training run's steady state: the second pass of each in one process (for reference)
SECOND = ("raw_scan_pass2", "shardwise_inproc_numpy_epoch2")
#: measured --repeats rounds (default 3) and alternated: the rows of the in-process target
FOCUS = (
    "raw_scan",
    "raw_scan_threads",
    "raw_scan_pages",
    "shardwise_first_epoch",
    "shardwise_first_epoch_heads",
    "shardwise_first_epoch_whole",
    *INPROC,
    *SECOND,
)
#: the rows of the first-epoch targets, run on every shape
FIRST = (
    "raw_scan",
    "raw_scan_pages",
    "shardwise_first_epoch",
    "shardwise_inproc_numpy_epoch2",
    "shardwise_batched",
)
SLOW = (
    "hf_streaming",
    "webdataset",
)  # per-sample peers that reach the time cap; --skip-slow leaves them out
#: the rows run on each data shape: the peers (and the per-sample rows) on the text data only
SHAPE_SYSTEMS = {
    "text": list(SYSTEMS),
    "emb": [
        "raw_scan",
        "raw_scan_threads",
        "raw_scan_pages",
        "raw_scan_256",
        "dataloader_ceiling",
        *INPROC,
        *SECOND,
        "shardwise_batched",
        "shardwise_first_epoch",
        "shardwise_first_epoch_heads",
        "shardwise_first_epoch_whole",
    ],
    "tokens": [*FIRST, "shardwise_first_epoch_heads", "shardwise_first_epoch_whole"],
    "images": [*FIRST, "shardwise_first_epoch_heads", "shardwise_first_epoch_whole"],
    "image_structs": [*FIRST, "shardwise_first_epoch_heads", "shardwise_first_epoch_whole"],
    "heldout": [*FIRST, "shardwise_first_epoch_heads", "shardwise_first_epoch_whole"],
}


def system_of(name: str) -> System:
    """The system a row measures (an ``@before`` variant measures its base row's)."""
    return SYSTEMS[base(name)]


def ideal_tvd(hist: list[int], trials: int = 2000, seed: int = 0) -> float:
    """Mean TVD of i.i.d. batches of BATCH rows drawn from the global label mix."""
    import numpy as np

    p = np.asarray(hist, dtype=np.float64)
    p /= p.sum()
    q = np.random.default_rng(seed).multinomial(BATCH, p, size=trials) / BATCH
    return float(0.5 * np.abs(q - p).sum(axis=1).mean())


def table(results: dict[str, dict[str, Any]], ideal: float | None) -> str:
    """The markdown table; ratios only between rows of this run."""
    ok = {k: v for k, v in results.items() if "error" not in v}
    raw = ok.get("raw_scan", {}).get("rows_per_s")
    ceiling = ok.get("dataloader_ceiling", {}).get("rows_per_s")
    fastest = max(
        (v["rows_per_s"] for k, v in ok.items() if system_of(k).env == "peers"), default=None
    )
    rows: list[list[Any]] = []
    for name, r in results.items():
        kind = system_of(name).kind
        if "error" in r:
            rows.append([name, kind, f"failed: {r['error'][:60]}"])
            continue
        rps = r["rows_per_s"]
        rows.append(
            [
                f"{name}{' (capped)' if r.get('capped') else ''}",
                kind,
                f"{rps:,.0f}",
                f"{fmt(ratio(rps, raw), '.2f')}x",
                f"{fmt(ratio(rps, ceiling), '.2f')}x",
                f"{fmt(ratio(rps, fastest), '.2f')}x",
                fmt(r["tvd"], ".3f"),
                f"{r['peak_rss_mb']:,.0f}",
                f"{r['cpu_s']:.1f}",
                fmt(r.get("setup_s"), ".1f"),
                fmt(r.get("first_batch_s"), ".3f"),
                r.get("median_of", 1),
                r.get("loadavg_1m", ["?"])[0],
            ]
        )
    if ideal is not None:
        rows.append([f"ideal (i.i.d. batches of {BATCH})", "", "", "", "", "", f"{ideal:.3f}"])
    return markdown(
        [
            "loader",
            "kind",
            "rows/s",
            "vs raw scan",
            "vs ceiling",
            "vs fastest peer",
            "shuffle TVD",
            "peak RSS MB",
            "CPU s",
            "set-up s",
            "first batch s",
            "runs",
            "load 1m",
        ],
        rows,
        right=range(2, 13),
    )


def targets(results: dict[str, dict[str, Any]], ideal: float) -> Checks:
    """The in-process path against the raw scan (speed, shuffle, memory); the other rows
    against the fastest peer; the DataLoader rows against their ceiling, for reference."""
    ok = {k: v for k, v in results.items() if "error" not in v}
    peers = {k: v for k, v in ok.items() if system_of(k).env == "peers"}
    fastest = max(peers.values(), key=lambda v: v["rows_per_s"], default=None)
    fastest_ps = max(
        (v for k, v in peers.items() if system_of(k).kind == "per_sample"),
        key=lambda v: v["rows_per_s"],
        default=None,
    )
    rps = {k: v["rows_per_s"] for k, v in ok.items()}
    checks = Checks()
    hf_rss = get(ok.get("hf_map_batched"), "peak_rss_mb")
    for name in INPROC:
        if name in ok:
            checks.add(f"{name} vs raw scan", ratio(rps[name], rps.get("raw_scan")), 1.0)
            checks.add(
                f"{name} vs raw scan, median of the rounds' own ratios (for reference)",
                paired_ratio(ok[name], ok.get("raw_scan")),
                None,
            )
            if "raw_scan_threads" in ok:
                checks.add(
                    f"{name} vs raw scan on Arrow's threads (for reference)",
                    ratio(rps[name], rps["raw_scan_threads"]),
                    None,
                )
            if "raw_scan_pages" in ok:
                checks.add(
                    f"{name} vs raw scan with shardwise's page reader (for reference)",
                    ratio(rps[name], rps["raw_scan_pages"]),
                    None,
                )
            checks.add(
                f"{name} shuffle TVD",
                ok[name]["tvd"],
                round(ideal, 3),
                spec=".3f",
                unit="",
                at_most=True,
                vs="i.i.d. batches",
            )
            if hf_rss:
                checks.add(
                    f"{name} peak RSS",
                    ok[name]["peak_rss_mb"],
                    round(hf_rss),
                    spec=",.0f",
                    unit=" MB",
                    at_most=True,
                    vs="hf_map_batched",
                )
    if all(k in ok for k in SECOND):
        checks.add(
            "shardwise_inproc_numpy second epoch vs raw scan second pass (steady state, for "
            "reference)",
            ratio(rps[SECOND[1]], rps[SECOND[0]]),
            None,
        )
    first_epoch_checks(ok, checks)
    sb, sp = rps.get("shardwise_batched"), rps.get("shardwise_per_sample")
    if fastest:
        checks.add(
            "shardwise batched vs fastest peer",
            ratio(sb, fastest["rows_per_s"]),
            1.5,
            vs=fastest["name"],
        )
    if fastest_ps:
        checks.add(
            "shardwise per-sample vs fastest peer per-sample",
            ratio(sp, fastest_ps["rows_per_s"]),
            1.0,
            vs=fastest_ps["name"],
        )
    for name in ("shardwise_batched", "shardwise_batched_wide", "shardwise_per_sample"):
        for bound in ("raw_scan", "dataloader_ceiling"):
            if name in rps and rps.get(bound):
                checks.add(
                    f"{name} (2 DataLoader workers) vs {bound} (for reference)",
                    ratio(rps[name], rps[bound]),
                    None,
                )
    sw = [ok[k]["tvd"] for k in ok if k.startswith("shardwise") and ok[k]["tvd"] is not None]
    best = min(
        (v for v in peers.values() if v["tvd"] is not None), key=lambda v: v["tvd"], default=None
    )
    streaming = [
        v for v in peers.values() if not v["name"].startswith("hf_map") and v["tvd"] is not None
    ]
    line = "shuffle: n/a"
    if sw and best:
        line = (
            f"shuffle: shardwise TVD {min(sw):.3f} vs best peer TVD {best['tvd']:.3f} "
            f"[{best['name']}] (ideal {ideal:.3f}, sorted order 0.900; lower is better)"
        )
        if streaming:
            bs = min(streaming, key=lambda v: v["tvd"])
            line += f"; best streaming (buffer-shuffle) peer TVD {bs['tvd']:.3f} [{bs['name']}]"
    checks.note(line)
    checks.data["shuffle"] = {
        "shardwise_tvd": min(sw) if sw else None,
        "best_peer_tvd": get(best, "tvd"),
        "best_peer": get(best, "name"),
        "ideal": ideal,
    }
    return checks


def before_after_table(rows: list[list[Any]]) -> str:
    """The before/after table of ``--before``."""
    return markdown(
        [
            "row",
            "after rows/s",
            "before rows/s",
            "after/before (medians)",
            "median of per-round ratios",
            "runs",
            "load 1m",
        ],
        rows,
        right=range(1, 7),
    )


def first_epoch_checks(ok: dict[str, dict[str, Any]], checks: Checks) -> None:
    """The first epoch of a fresh process (construction included) against both raw scans;
    its time to the first batch against one unit's decode time; its peak RSS against
    ``shuffle_bytes + prefetch_bytes`` (the process's whole RSS, interpreter and torch
    included: the raw scan's peak is printed for scale). The same for the row with head
    windows (``first_window="heads"``)."""
    for name in (
        "shardwise_first_epoch",
        "shardwise_first_epoch_heads",
        "shardwise_first_epoch_whole",
    ):
        _first_epoch_check(name, ok, checks)


def _first_epoch_check(name: str, ok: dict[str, dict[str, Any]], checks: Checks) -> None:
    fe = ok.get(name)
    if fe is None:
        return
    for base_row, target in (("raw_scan", 1.0), ("raw_scan_pages", 1.0)):
        if base_row in ok:
            checks.add(
                f"{name} vs {base_row}",
                ratio(fe["rows_per_s"], ok[base_row]["rows_per_s"]),
                target,
            )
            checks.add(
                f"{name} vs {base_row}, median of the rounds' own ratios",
                paired_ratio(fe, ok[base_row]),
                None,
            )
    decode = get(ok.get("raw_scan_pages"), "unit_decode_s")
    if decode and fe.get("first_batch_s") is not None:
        checks.add(
            f"{name} time to first batch",
            fe["first_batch_s"],
            round(decode["median"] + 0.05, 3),
            spec=".3f",
            unit=" s",
            at_most=True,
            vs="one unit's decode (median) + 50 ms"
            + (
                f"; the scan's first unit, in its fresh process: {decode['first']:.3f} s"
                if "first" in decode
                else ""
            ),
        )
    if fe.get("shuffle_bytes"):
        _memory_check(name, fe, get(ok.get("raw_scan"), "peak_rss_mb"), checks)


def _memory_check(name: str, fe: dict[str, Any], scan_peak: Any, checks: Checks) -> None:
    """The loader's peak memory against ``shuffle_bytes + prefetch_bytes`` + 30%: the
    process's peak RSS less its RSS before the timed work (the interpreter, torch and
    shardwise's import, which the budgets do not govern: 250-270 MB here, a third of the
    default budgets). The whole process's peak is printed with it."""
    budget = 1.3 * (fe["shuffle_bytes"] + fe["prefetch_bytes"]) / 2**20
    start = fe.get("rss_start_mb") or 0.0
    checks.add(
        f"{name} peak memory",
        fe["peak_rss_mb"] - start,
        round(budget),
        spec=",.0f",
        unit=" MB",
        at_most=True,
        vs=f"(shuffle_bytes + prefetch_bytes) x 1.3; the peak RSS less the {start:,.0f} MB "
        f"before the dataset (whole process {fe['peak_rss_mb']:,.0f} MB; raw scan peak "
        f"{fmt(scan_peak, ',.0f')} MB)",
    )


def rounds(names: list[str], args: Any) -> list[list[str]]:
    """The names run in each round: the focus rows (the in-process target's) in
    ``--repeats`` rounds, the others in the first ``--other-rounds`` of them."""
    focus = [n for n in names if base(n) in FOCUS]
    others = [n for n in names if base(n) not in FOCUS]
    return [
        [n for n in names if n in focus or (n in others and r < args.other_rounds)]
        for r in range(max(args.repeats if focus else 0, args.other_rounds if others else 0))
    ]


def measure(names: list[str], data: Path, args: Any) -> dict[str, dict[str, Any]]:
    """Every loader in its rounds, alternated; the median run (by rows/s) of each."""
    logdir = data / "logs"
    logdir.mkdir(exist_ok=True)

    def once(name: str) -> dict[str, Any]:
        py = sys.executable if system_of(name).env == "main" else str(PEERS.python)
        r = run_system(
            Path(__file__).resolve(),
            worker_systems(SYSTEMS)[name],
            py,
            timeout=args.timeout,
            logdir=logdir,
            idle_wait=args.idle_wait,
            worker_kwargs={"data": str(data), "time_cap": args.time_cap},
            extra_env=variant_env(name, str(ROOT / "src"), args.before),
        )
        if "error" not in r:
            print(
                f" {r['rows']:,} rows in {r['seconds']:.1f} s = {r['rows_per_s']:,.0f} rows/s, "
                f"TVD {fmt(r['tvd'], '.3f')}, peak RSS {r['peak_rss_mb']:,.0f} MB, CPU "
                f"{r['cpu_s']:.1f} s",
                flush=True,
            )
        return r

    plan = rounds(names, args)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    for i, this_round in enumerate(plan):
        print(f"round {i + 1}/{len(plan)}", flush=True)
        # the machine drops cached file pages within minutes (a file of 240 MB was down
        # to 60-90 MB cached a quarter of an hour after a read): every round reads its
        # files from memory, not only the first
        warm_page_cache(data_files(data))
        for name, got in alternate(rotated(this_round, i), 1, once).items():
            if not (runs[name] and runs[name][-1].get("error")):  # a failed row is not run again
                runs[name].extend({**r, "round": i} for r in got)
    return {
        n: median_run(runs[n], "rows_per_s", higher_is_better=True)
        | {
            "by_round": by_round(runs[n]),
            "loads": [r["loadavg_1m"][0] for r in runs[n] if "loadavg_1m" in r],
        }
        | first_batches(runs[n])
        for n in names
        if runs[n]
    }


def first_batches(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over the successful runs of the time to the first batch (the median run
    by rows/s is one sample of it), and each run's, keyed by its round."""
    import statistics

    got = {
        str(r["round"]): r["first_batch_s"]
        for r in runs
        if not r.get("error") and r.get("first_batch_s") is not None
    }
    if not got:
        return {}
    return {"first_batch_s": statistics.median(got.values()), "first_batch_by_round": got}


def data_files(data: Path) -> list[Path]:
    """The files of a shape's data that the rows read (Parquet and tar shards)."""
    return sorted((data / "parquet").glob("*.parquet")) + sorted((data / "wds").glob("*.tar"))


def rotated(names: list[str], i: int) -> list[str]:
    """Round ``i``'s running order: the rows rotated by ``i // 2``, so that no row always
    runs first (right after the idle wait), and reversed in odd rounds, so that no row
    always runs right after the same neighbour (a rotation alone keeps each row's
    predecessor: with ``--before`` a row always followed the previous row's ``@before``
    variant, and the unchanged raw scan measured 0.35-0.94x its own twin)."""
    k = (i // 2) % len(names) if names else 0
    order = names[k:] + names[:k]
    return order[::-1] if i % 2 else order


def by_round(runs: list[dict[str, Any]]) -> dict[str, float]:
    """rows/s of each successful run, keyed by its round (``"0"``, ``"1"``, ...)."""
    return {str(r["round"]): r["rows_per_s"] for r in runs if not r.get("error")}


def paired_ratio(row: dict[str, Any], base: dict[str, Any] | None) -> float | None:
    """The median over rounds of ``row``'s rows/s over ``base``'s in the same round
    (None when they share no round)."""
    import statistics

    if base is None:
        return None
    mine, theirs = row.get("by_round", {}), base.get("by_round", {})
    ratios = [mine[k] / theirs[k] for k in mine if theirs.get(k)]
    return statistics.median(ratios) if ratios else None


def run_shape(shape: str, rows: int, names: list[str], args: Any, versions: Any) -> dict[str, Any]:
    """Measure ``names`` on the data of ``shape``; print its table and checks."""
    import json

    from datagen.loader_data import DATA_VERSION, SHAPES, generate

    data = generate(rows, shape=shape)
    meta = json.loads((data / "meta.json").read_text())
    sh = SHAPES[shape]
    rows = meta["rows"]
    print(
        f"\n## shape {shape!r}: {rows:,} rows ({', '.join(sh.columns)}; emb {sh.emb_dim} float32), "
        f"{sh.files} files, {meta['row_groups']} row groups",
        flush=True,
    )
    results = measure(names, data, args)
    ideal = ideal_tvd(meta["label_hist"])
    print(
        f"\n### loader benchmark, shape {shape!r}: {rows:,} rows, batch {BATCH}, {WORKERS} "
        "DataLoader workers, "
        f"shuffle buffer {BUFFER:,} ({os.cpu_count()} CPUs)\n\n{table(results, ideal)}\n"
    )
    checks = targets({k: v for k, v in results.items() if not k.endswith(SUFFIX)}, ideal)
    checks.print()
    compared = before_after(results)
    if compared:
        print(
            f"\n### before ({args.before}) vs after ({ROOT / 'src'}), shape {shape!r}, same "
            f"run\n\n{before_after_table(compared)}\n"
        )
    print("\noutput types (label / emb / text):")
    for name, r in results.items():
        if "types" in r:
            print(
                f"  {name}: {r['types'].get('label')} / {r['types'].get('emb')} / "
                f"{r['types'].get('text')}"
            )
    return {
        "data": meta | {"version": DATA_VERSION},
        "ideal_tvd": ideal,
        "results": results,
        "checks": checks.data,
        "table": table(results, ideal),
        "check_lines": checks.lines,
        "before_after": {"before_src": args.before, "rows": compared} if compared else None,
    }


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "200,000 rows instead of 2,000,000")
    ap.add_argument("--rows", type=int, help="rows of the generated data sets (overrides --quick)")
    ap.add_argument(
        "--shape",
        nargs="+",
        choices=list(SHAPE_SYSTEMS),
        default=list(SHAPE_SYSTEMS),
        help="data shapes to run on (default: all)",
    )
    ap.add_argument(
        "--other-rounds",
        type=int,
        default=1,
        help="rounds of the rows other than the raw scan and the in-process ones (default 1)",
    )
    ap.add_argument(
        "--skip-slow",
        action="store_true",
        help=f"leave out the slowest peers ({', '.join(SLOW)}) for a faster, focused run",
    )
    ap.add_argument(
        "--time-cap",
        type=float,
        default=150.0,
        help=(
            "stop a loader after this many seconds of its epoch (default 150; 'inf': whole epochs)"
        ),
    )
    ap.add_argument(
        "--fresh",
        action="store_true",
        help="with --only: do not show the saved results of the others",
    )
    ap.add_argument(
        "--before",
        metavar="SRC",
        help=(
            "also run every shardwise row with PYTHONPATH=SRC (another checkout's src/, e.g. "
            "a worktree of an earlier commit) as <name>@before, alternated in the same rounds"
        ),
    )
    args = ap.parse_args(argv)
    worker = maybe_worker(args, worker_systems(SYSTEMS))
    if worker is not None:
        return worker
    rows = args.rows or (200_000 if args.quick else 2_000_000)
    names = [n for n in chosen(ap, args.only, list(SYSTEMS)) if not (args.skip_slow and n in SLOW)]
    args.timeout = args.timeout or (600.0 if rows <= 200_000 else 2400.0)
    args.idle_wait = (
        args.idle_wait if args.idle_wait is not None else (0.0 if rows <= 200_000 else 60.0)
    )
    args.repeats = args.repeats or 3
    versions: dict[str, str] | None = {}
    if any(SYSTEMS[n].env == "peers" for n in names):
        versions, err = ensure_venv(PEERS)
        print(
            "peers:", err or ", ".join(f"{k} {v}" for k, v in (versions or {}).items()), flush=True
        )
    out = (
        HERE
        / "results"
        / (
            f"loader-before-after-{rows}.json"
            if args.before
            else "loader.json"
            if rows == 2_000_000
            else "loader-quick.json"
            if rows == 200_000
            else f"loader-{rows}.json"
        )
    )
    shapes: dict[str, Any] = {}
    for shape in args.shape:
        measured = [n for n in names if n in SHAPE_SYSTEMS[shape]]
        if args.before:
            measured = with_variants(measured, SYSTEMS)
        shapes[shape] = run_shape(shape, rows, measured, args, versions)
        if (
            args.only and not args.fresh
        ):  # rows of the last run not measured now: apart, with their date
            shapes[shape]["earlier_results"] = earlier_results(
                out,
                measured,
                SHAPE_SYSTEMS[shape],
                {"rows_per_s": "rows/s", "tvd": "shuffle TVD", "peak_rss_mb": "peak RSS MB"},
                section=shape,
            )
    write_json(
        out,
        {
            "rows": rows,
            "batch_size": BATCH,
            "num_workers": WORKERS,
            "shuffle_buffer": BUFFER,
            "machine": machine(),
            "git": git_info(ROOT),
            "peer_versions": versions,
            "repeats": args.repeats,
            "other_rounds": args.other_rounds,
            "skipped_slow": args.skip_slow,
            "statistic": "median (rows/s), rounds alternated, running order turned every two "
            "rounds and reversed in odd ones",
            "shapes": shapes,
        },
        ROOT,
    )
    return (
        0 if all("error" not in r for sh in shapes.values() for r in sh["results"].values()) else 1
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
