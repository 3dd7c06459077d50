#!/usr/bin/env python
"""Benchmark shardwise's MinHash near-duplicate removal against datasketch, datatrove and
Data-Juicer.

Run from the repository root::

    .venv/bin/python benchmarks/bench_dedup.py [--quick] [--only NAME ...] [--repeats R]

or as ``python benchmarks/run.py dedup [--quick]``. The data, the systems, the shingling
of each and the ground truth are described in ``benchmarks/README.md``. Writes
``benchmarks/results/dedup.json`` (``dedup-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from datagen.dedup_shapes import SHAPES
from harness.cli import base_parser, chosen, maybe_worker
from harness.report import Checks, earlier_results, fmt, git_info, machine, markdown, write_json
from harness.runner import System, alternate, median_run, run_system
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
#: 9 x 13 is what every peer's optimiser picks for (0.8, 128); datatrove is told so
CFG: dict[str, Any] = {
    "ngram": 5,
    "num_perm": 128,
    "threshold": 0.8,
    "bands": 9,
    "rows": 13,
    "workers": 2,
}
VENVS = {
    # orjson: datatrove's JsonlReader needs it (not pulled in by datatrove[processing])
    "peers": Venv(
        HERE / ".venv-dedup",
        ("datasketch", "datatrove[processing]", "orjson", "psutil", "numpy", "pyarrow"),
        {m: m for m in ("datasketch", "datatrove", "orjson", "psutil", "numpy", "pyarrow")},
    ),
    # aiohttp: data_juicer imports it but does not require it
    "dj": Venv(
        HERE / ".venv-dedup-dj",
        ("py-data-juicer", "aiohttp", "psutil"),
        {
            "py-data-juicer": "data_juicer.ops.deduplicator.document_minhash_deduplicator",
            "datasets": "datasets",
            "psutil": "psutil",
        },
        install_timeout=600.0,
    ),
}
SYSTEMS = {
    s.name: s
    for s in [
        System("shardwise", "adapters.shardwise_dedup:dedup", kind="shardwise"),
        System(
            "shardwise_noverify",
            "adapters.shardwise_dedup:dedup",
            kind="shardwise",
            kwargs=(("verify", False),),
        ),
        System(
            "shardwise_18x7",
            "adapters.shardwise_dedup:dedup",
            kind="shardwise",
            kwargs=(("bands", 18), ("rows", 7)),
        ),
        System("datasketch", "adapters.datasketch:dedup", env="peers"),
        System("datatrove", "adapters.datatrove:dedup", env="peers"),
        System("data-juicer", "adapters.data_juicer:dedup", env="dj"),
    ]
}
SCALE = System("shardwise_scale", "adapters.shardwise_dedup:scale", kind="shardwise")
LABELS = {
    "shardwise": "shardwise (verify=True)",
    "shardwise_noverify": "shardwise (verify=False)",
    "shardwise_18x7": "shardwise (verify=True, bands=18, rows=7)",
}


def environments(names: list[str]) -> dict[str, tuple[str | None, dict[str, str] | None, str]]:
    """env key -> (python or None, versions, error) for the environments ``names`` need."""
    envs: dict[str, tuple[str | None, dict[str, str] | None, str]] = {
        "main": (sys.executable, {}, "")
    }
    for key in sorted({SYSTEMS[n].env for n in names} - {"main"}):
        versions, err = ensure_venv(VENVS[key])
        envs[key] = (str(VENVS[key].python) if versions else None, versions, err)
    return envs


def measure(names: list[str], data: Path, args: Any, envs: dict[str, Any]) -> list[dict[str, Any]]:
    """Every system ``repeats`` times, alternated; the median run of each."""
    logdir = data / "logs"
    logdir.mkdir(exist_ok=True)

    def once(name: str) -> dict[str, Any]:
        py, _, err = envs[SYSTEMS[name].env]
        if py is None:
            print(f"--- {name}: not run ({err})", flush=True)
            return {"name": name, "error": f"not installed: {err}"}
        r = run_system(
            Path(__file__).resolve(),
            SYSTEMS[name],
            py,
            timeout=args.timeout,
            logdir=logdir,
            idle_wait=args.idle_wait,
            scratch=data,
            worker_kwargs={"data": str(data), "cfg": CFG},
        )
        if not r.get("error"):
            print(
                f" {r['seconds']:.1f} s, removed {len(r['removed']):,}, peak RSS "
                f"{r['peak_rss_mb']:,.0f} MB",
                flush=True,
            )
        return r

    runs = alternate(names, args.repeats, once)
    return [median_run(runs[n], "seconds") for n in names]


def score(results: list[dict[str, Any]], data: Path, planted: list[list[Any]]) -> dict[str, Any]:
    """Precision and recall of every result against the exact truth; the truth's stats."""
    from datagen.dedup_truth import Truth

    print("ground truth: exact Jaccard (prefix filtering) ...", end="", flush=True)
    t0 = time.perf_counter()
    truth = Truth(data, int(CFG["ngram"]), float(CFG["threshold"]))
    truth.crosscheck([[c, s] for c, s, *_ in planted])
    for r in results:
        if not r.get("error"):
            truth.crosscheck(r.get("pairs", []))
    truth.finish()
    print(
        f" {len(truth.pairs):,} true pairs, {truth.should_remove:,} documents should go "
        f"({time.perf_counter() - t0:.1f} s; cross-check added {truth.added_by_crosscheck})",
        flush=True,
    )
    for r in results:
        if not r.get("error"):
            r["precision"], r["recall"] = truth.score(r["removed"])
            r["n_removed"] = len(r["removed"])
    return truth.report()


def table(results: list[dict[str, Any]], n: int) -> str:
    """The markdown table of the results."""
    rows = []
    for r in results:
        label = LABELS.get(r["name"], r["name"])
        if r.get("error"):
            rows.append([label, f"failed: {r['error']}"])
            continue
        sig = f"{n / r['sig_seconds']:,.0f} ({r['sig_procs']})" if r.get("sig_seconds") else "-"
        rows.append(
            [
                label,
                sig,
                f"{r['seconds']:.1f}",
                f"{n / r['seconds']:,.0f}",
                f"{r['peak_rss_mb']:,.0f}",
                f"{len(r['removed']):,}",
                fmt(r.get("precision"), ".4f"),
                fmt(r.get("recall"), ".4f"),
            ]
        )
    return markdown(
        [
            "system",
            "signatures docs/s (procs)",
            "end-to-end s",
            "end-to-end docs/s",
            "peak RSS MB",
            "removed",
            "precision",
            "recall",
        ],
        rows,
        right=range(1, 8),
    )


def targets(results: list[dict[str, Any]], n: int) -> Checks:
    """The target lines: speed against the peers, precision and recall."""
    checks = Checks()
    by = {r["name"]: r for r in results if not r.get("error")}
    peers = [r for k, r in by.items() if SYSTEMS[k].env != "main"]
    ds = by.get("datasketch")
    others = [r for r in peers if r["name"] != "datasketch"] or peers
    fastest = min(others, key=lambda r: r["seconds"]) if others else None
    for key, label in (
        ("shardwise", "shardwise"),
        ("shardwise_noverify", "shardwise (verify=False)"),
    ):
        sw = by.get(key)
        if sw is None:
            continue
        if ds or key == "shardwise":
            checks.add(
                f"{label} end-to-end speed vs datasketch",
                ds["seconds"] / sw["seconds"] if ds else None,
                10,
            )
        if fastest or key == "shardwise":
            checks.add(
                f"{label} end-to-end speed vs fastest other peer",
                fastest["seconds"] / sw["seconds"] if fastest else None,
                3,
                vs=fastest["name"] if fastest else None,
            )
    sw = by.get("shardwise")
    if sw:
        checks.add("shardwise precision (verify=True)", sw["precision"], 0.98, spec=".4f", unit="")
        checks.add("shardwise recall (verify=True)", sw["recall"], 0.95, spec=".4f", unit="")
        for d, s in sw.get("phases", []):
            checks.note(f"  shardwise phase {d}: {s:.2f} s")
    tuned = by.get("shardwise_18x7")
    if tuned:
        checks.note(
            "(shardwise with bands=18, rows=7, verify=True: precision "
            f"{fmt(tuned['precision'], '.4f')}, "
            f"recall {fmt(tuned['recall'], '.4f')}, {n / tuned['seconds']:,.0f} docs/s end to end)"
        )
    return checks


def run_shape(
    shape: str, n: int, names: list[str], args: Any, envs: dict[str, Any]
) -> dict[str, Any]:
    """One corpus shape: every system measured and scored; the shape's results block."""
    import json

    from datagen.dedup_shapes import generate_shape

    print(f"\n=== {shape} documents", flush=True)
    data = generate_shape(shape, n)
    meta = json.loads((data / "meta.json").read_text())
    results = measure(names, data, args, envs)
    truth = score(results, data, meta["planted"])
    print(
        f"\n### {shape}: {n:,} documents, {meta['bytes'] / 2**20:.1f} MB\n\n{table(results, n)}\n"
    )
    checks = targets(results, n)
    checks.print()
    return {
        "docs": n,
        "data": {k: v for k, v in meta.items() if k != "planted"}
        | {"planted": len(meta["planted"]), "dir": os.path.relpath(data, ROOT)},
        "ground_truth": truth,
        "checks": checks.data,
        "results": [
            {k: v for k, v in r.items() if k not in ("removed", "pairs")}
            | (
                {
                    "docs_per_s": n / r["seconds"],
                    "sig_docs_per_s": n / r["sig_seconds"] if r.get("sig_seconds") else None,
                }
                if not r.get("error")
                else {}
            )
            for r in results
        ],
    }


def run_scale(n: int, args: Any) -> dict[str, Any]:
    """The scale row: shardwise alone on ``n`` generated documents."""
    from datagen.dedup_scale import generate_scale

    print(f"\n=== scale: {n:,} generated documents", flush=True)
    data = generate_scale(n)
    r = run_system(
        Path(__file__).resolve(),
        SCALE,
        sys.executable,
        timeout=max(args.timeout, 7200.0),
        logdir=data,
        scratch=data,
        worker_kwargs={"data": str(data), "cfg": CFG, "memory_budget": args.memory_budget},
    )
    if r.get("error"):
        print(f" failed: {r['error']}")
        return r
    checks = Checks()
    print(
        f" {r['seconds']:.0f} s = {n / r['seconds']:,.0f} docs/s, removed {r['removed']:,}, peak "
        f"RSS of all {r['max_procs']} processes {r['peak_rss_mb']:,.0f} MB, {r['tasks']} tasks"
    )
    checks.add(
        "scale: peak RSS of every process together",
        r["peak_rss_mb"] / 1024,
        4,
        at_most=True,
        unit=" GB",
    )
    for d, s in r["phases"]:
        checks.note(f"  scale phase {d}: {s:.1f} s")
    checks.print()
    return r | {"docs_per_s": n / r["seconds"], "checks": checks.data}


def overview(blocks: dict[str, dict[str, Any]]) -> Checks:
    """One line per shape and target, and whether every shape meets it."""
    checks = Checks()
    every: dict[str, list[bool | None]] = {}
    for block in blocks.values():
        for label, c in block["checks"].items():
            if label.startswith("shardwise") and c.get("target") is not None:
                every.setdefault(label, []).append(c["met"])
    for label, mets in every.items():
        ok = None if len(mets) < len(blocks) or None in mets else all(mets)
        checks.note(f"every shape: {label}: {'MET' if ok else 'n/a' if ok is None else 'NOT MET'}")
        checks.data[f"every shape: {label}"] = {"met": ok}
    return checks


def compile_shardwise() -> None:
    """Byte-compile the shardwise package the runs import, as installing it would (the
    peers' venvs hold compiled modules; with ``PYTHONDONTWRITEBYTECODE`` set and a source
    checkout, every process of a run would compile each shardwise module again)."""
    import compileall

    import shardwise

    compileall.compile_dir(str(Path(shardwise.__file__).parent), quiet=1)


def main(argv: list[str]) -> int:
    ap = base_parser(
        __doc__, "10,000 short and medium documents and 300 long ones, one round, no scale row"
    )
    ap.add_argument(
        "--docs", type=int, help="documents of the short and medium shapes (overrides --quick)"
    )
    ap.add_argument(
        "--shape", nargs="+", choices=list(SHAPES), help="corpus shapes (default: all three)"
    )
    ap.add_argument(
        "--scale",
        type=int,
        help="documents of the scale row (default 5,000,000; 0: none; --quick: none)",
    )
    ap.add_argument(
        "--memory-budget", type=int, default=2**30, help="the scale row's memory_budget per process"
    )
    ap.add_argument("--out", help="JSON output path")
    args = ap.parse_args(argv)
    worker = maybe_worker(args, SYSTEMS | {SCALE.name: SCALE})
    if worker is not None:
        return worker
    args.timeout = args.timeout or (900.0 if args.quick else 2400.0)
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 20.0)
    scale = args.scale if args.scale is not None else (0 if args.quick else 5_000_000)
    out = (
        Path(args.out)
        if args.out
        else HERE / "results" / ("dedup-quick.json" if args.quick else "dedup.json")
    )
    print(
        f"python {platform.python_version()}, cpus={os.cpu_count()}, word {CFG['ngram']}-grams, "
        f"{CFG['num_perm']} permutations, threshold {CFG['threshold']}",
        flush=True,
    )
    t_start, git = time.perf_counter(), git_info(ROOT)
    names = chosen(ap, args.only, list(SYSTEMS))
    envs = environments(names)
    compile_shardwise()
    blocks = {}
    for shape in args.shape or list(SHAPES):
        n = SHAPES[shape]["quick" if args.quick else "docs"]
        blocks[shape] = run_shape(
            shape, args.docs if args.docs and shape != "long" else n, names, args, envs
        )
    print()
    every = overview(blocks)
    every.print()
    scale_row = run_scale(scale, args) if scale else None
    earlier = earlier_results(out, names, SYSTEMS, {"seconds": "end-to-end s"}) if args.only else {}
    medium = blocks.get("medium", next(iter(blocks.values())))
    write_json(
        out,
        {
            "benchmark": "dedup",
            "quick": args.quick,
            "git": git,
            "machine": machine(),
            "config": {
                **CFG,
                "timeout_s": args.timeout,
                "repeats": args.repeats,
                "statistic": "median of the rounds (end to end), systems alternated within each "
                "round",
                "idle_wait_s": args.idle_wait,
            },
            "shapes": blocks,
            "every_shape": every.data,
            "scale": scale_row,
            # the medium shape's block at the top level, where earlier results files had it
            "data": medium["data"],
            "ground_truth": medium["ground_truth"],
            "results": medium["results"],
            "checks": medium["checks"],
            "environments": {k: v[1] for k, v in envs.items() if k != "main"},
            "env_errors": {k: v[2] for k, v in envs.items() if v[2]},
            "earlier_results": earlier,
            "total_s": time.perf_counter() - t_start,
        },
        ROOT,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
