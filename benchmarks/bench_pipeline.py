#!/usr/bin/env python
"""Benchmark a shardwise text-cleaning pipeline against HF datasets, Ray Data, Dask and pyarrow.

Run from the repository root::

    .venv/bin/python benchmarks/bench_pipeline.py [--quick] [--only NAME,NAME] [--repeats R]

or as ``python benchmarks/run.py pipeline [--quick]``. The operator chain, the data, the
systems and what is measured are described in ``benchmarks/README.md``. Prints a markdown
table and target lines; writes ``benchmarks/results/pipeline.json``
(``pipeline-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from adapters.text_chain import CORES, MIN_WORDS
from harness.cli import base_parser, chosen, maybe_worker
from harness.monitor import proc_stat
from harness.report import Checks, earlier_results, fmt, get, machine, markdown, ratio, write_json
from harness.runner import System, alternate, median_run, run_system, warm_page_cache
from harness.venvs import Venv, ensure_venv

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
# aiohttp: Ray Data's read_parquet imports fsspec's HTTP filesystem (ray[data] does not require it)
PEERS = Venv(
    HERE / ".venv-pipeline",
    (
        "datasets",
        "ray[data]",
        "dask[distributed]",
        "pyarrow",
        "numpy",
        "pandas",
        "psutil",
        "aiohttp",
    ),
    {
        m: m
        for m in (
            "datasets",
            "ray",
            "dask",
            "distributed",
            "pyarrow",
            "numpy",
            "pandas",
            "psutil",
            "xxhash",
            "aiohttp",
        )
    },
)
REFERENCE = "shardwise-2proc"


def _system(name: str, run: str, env: str, kind: str, **kw: Any) -> System:
    return System(name, "adapters.text_chain:measured", env, kind, (("run", run), *kw.items()))


SYSTEMS = {
    s.name: s
    for s in [
        _system(
            "shardwise-2proc", "adapters.shardwise_pipeline:pipeline", "main", "shardwise", nproc=2
        ),
        _system(
            "shardwise-1proc", "adapters.shardwise_pipeline:pipeline", "main", "shardwise", nproc=1
        ),
        _system("pyarrow", "adapters.pyarrow_scan:pipeline", "main", "baseline"),
        _system("hf-datasets", "adapters.hf_datasets:pipeline", "peers", "peer"),
        _system("ray-data", "adapters.ray_data:pipeline", "peers", "peer"),
        _system("dask", "adapters.dask:pipeline", "peers", "peer"),
    ]
}


def with_machine_load(res: dict[str, Any], stat0: tuple[int, int] | None) -> dict[str, Any]:
    """Add the cores our run used and the cores other work used meanwhile (/proc/stat)."""
    stat1 = proc_stat()
    if stat0 and stat1 and stat1[0] > stat0[0] and "error" not in res:
        busy = (os.cpu_count() or 1) * (1 - (stat1[1] - stat0[1]) / (stat1[0] - stat0[0]))
        res["machine_busy_cores"] = busy
        res["our_cores"] = res["cpu_s"] / res["cpu_window_s"] if res.get("cpu_window_s") else None
        res["other_cores"] = max(0.0, busy - res["cpu_s"] / res["process_s"])  # approximate
    return res


def measure(
    names: list[str], data: Path, args: Any
) -> tuple[dict[str, dict[str, Any]], dict[str, Any]]:
    """Every system ``repeats`` times, alternated; the median run (by wall_s) of each."""
    logdir = data / "logs"
    logdir.mkdir(exist_ok=True)

    def once(name: str) -> dict[str, Any]:
        py = sys.executable if SYSTEMS[name].env == "main" else str(PEERS.python)
        stat0 = proc_stat()
        r = with_machine_load(
            run_system(
                Path(__file__).resolve(),
                SYSTEMS[name],
                py,
                timeout=args.timeout,
                logdir=logdir,
                idle_wait=args.idle_wait,
                scratch=data,
                worker_kwargs={"data": str(data)},
            ),
            stat0,
        )
        if "error" not in r:
            print(
                f" {r['wall_s']:.1f} s (start-up {r['startup_s']:.1f} s), {r['output_rows']:,} "
                f"rows out; used {fmt(r.get('our_cores'), '.2f')} cores, other work "
                f"{fmt(r.get('other_cores'), '.2f')} cores",
                flush=True,
            )
        return r

    runs = alternate(names, args.repeats, once)
    return {n: median_run(runs[n], "wall_s") for n in names}, runs


def check_output(
    name: str, r: dict[str, Any], ref: dict[str, Any] | None, mismatches: list[str]
) -> str:
    """``reference``, ``ok`` or the output columns that differ from the reference's."""
    if ref is None:
        return "no reference"
    if name == REFERENCE:
        return "reference"
    bad = [k for k in ("output_rows", "id_sum", "text_chars") if r[k] != ref[k]]
    if bad:
        mismatches.append(f"{name}: " + ", ".join(f"{k} {r[k]:,} vs {ref[k]:,}" for k in bad))
    return "ok" if not bad else "**MISMATCH** " + ", ".join(bad)


def table(results: dict[str, dict[str, Any]], rows: int, mismatches: list[str]) -> str:
    """The markdown table; times relative to shardwise-2proc of this run."""
    ref = results.get(REFERENCE) if "error" not in results.get(REFERENCE, {"error": 1}) else None
    out: list[list[Any]] = []
    for name, r in results.items():
        if "error" in r:
            out.append([name, f"failed: {r['error'][:80]}"])
            continue
        out.append(
            [
                name,
                f"{r['wall_s']:.1f}",
                f"{rows / r['wall_s']:,.0f}",
                f"{fmt(ratio(r['wall_s'], get(ref, 'wall_s')), '.2f')}x",
                f"{r['output_rows']:,}",
                check_output(name, r, ref, mismatches),
                f"{r['startup_s']:.1f}",
                fmt(r.get("setup_s"), ".1f"),
                "/".join(f"{x:.1f}" for x in r.get("runs_wall_s", [r["wall_s"]])),
                fmt(r.get("our_cores"), ".2f"),
                fmt(r.get("other_cores"), ".2f"),
            ]
        )
    return markdown(
        [
            "system",
            "wall s",
            "rows/s",
            "time vs shardwise-2proc",
            "output rows",
            "check",
            "start-up s",
            "set-up s",
            "runs s",
            "cores used",
            "other work (cores)",
        ],
        out,
        right=(1, 2, 3, 4, 6, 7, 9, 10),
    )


def targets(results: dict[str, dict[str, Any]]) -> Checks:
    """Speed against the fastest peer, the pyarrow baseline and one process."""
    ok = {k: v for k, v in results.items() if "error" not in v}
    ref_s = ok.get(REFERENCE, {}).get("wall_s")
    fastest = min(
        (v for k, v in ok.items() if SYSTEMS[k].kind == "peer"),
        key=lambda v: v["wall_s"],
        default=None,
    )
    checks = Checks()
    checks.add(
        "shardwise 2-proc vs fastest peer",
        ratio(get(fastest, "wall_s"), ref_s),
        1.5,
        vs=get(fastest, "name"),
    )
    checks.add(
        "shardwise 2-proc vs pyarrow single-process baseline",
        ratio(ok.get("pyarrow", {}).get("wall_s"), ref_s),
        None,
    )
    checks.add(
        "shardwise 2-proc vs own 1-proc",
        ratio(ok.get("shardwise-1proc", {}).get("wall_s"), ref_s),
        1.8,
    )
    return checks


def main(argv: list[str]) -> int:
    ap = base_parser(__doc__, "200,000 rows instead of 2,000,000, one run each")
    ap.add_argument("--rows", type=int, help="rows of the generated data set (overrides --quick)")
    ap.add_argument(
        "--json", help="write the JSON here instead of benchmarks/results/pipeline*.json"
    )
    args = ap.parse_args(argv)
    worker = maybe_worker(args, SYSTEMS)
    if worker is not None:
        return worker
    import json

    from datagen.pipeline_data import generate

    rows = args.rows or (200_000 if args.quick else 2_000_000)
    names = chosen(ap, args.only, list(SYSTEMS))
    args.repeats = args.repeats or 1  # one pass of all six takes 13-20 minutes at full size
    args.timeout = args.timeout or (900.0 if rows <= 200_000 else 2400.0)
    args.idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 60.0)
    data = generate(rows)
    versions: dict[str, str] | None = {}
    if any(SYSTEMS[n].env == "peers" for n in names):
        versions, err = ensure_venv(PEERS)
        print(
            "peers:", err or ", ".join(f"{k} {v}" for k, v in (versions or {}).items()), flush=True
        )
    warm_page_cache(sorted((data / "input").glob("*.parquet")))
    results, runs = measure(names, data, args)
    mismatches: list[str] = []
    text = table(results, rows, mismatches)
    print(
        f"\n### pipeline benchmark: {rows:,} rows, NFKC + whitespace, URL strip, >= {MIN_WORDS} "
        "words, exact dedup; "
        f"{CORES} processes; median of {args.repeats} ({os.cpu_count()} CPUs)\n\n{text}\n"
    )
    checks = targets(results)
    checks.data["mismatches"] = mismatches
    checks.print()
    for m in mismatches:
        print(f"!!! OUTPUT MISMATCH vs {REFERENCE}: {m}")
    if not mismatches and "error" not in results.get(REFERENCE, {"error": 1}):
        print(f"output check: every system's rows, id sum and text length equal {REFERENCE}'s")
    out = (
        Path(args.json)
        if args.json
        else HERE
        / "results"
        / (
            "pipeline.json"
            if rows == 2_000_000
            else "pipeline-quick.json"
            if rows == 200_000
            else f"pipeline-{rows}.json"
        )
    )
    earlier = earlier_results(out, names, SYSTEMS, {"wall_s": "wall s"}) if args.only else {}
    write_json(
        out,
        {
            "benchmark": "pipeline",
            "quick": args.quick,
            "rows": rows,
            "repeats": args.repeats,
            "statistic": "median",
            "min_words": MIN_WORDS,
            "data": json.loads((data / "meta.json").read_text()),
            "machine": machine(),
            "peer_versions": versions,
            "results": results,
            "all_runs": runs,
            "checks": checks.data,
            "table": text,
            "check_lines": checks.lines,
            "earlier_results": earlier,
        },
        ROOT,
    )
    return 0 if all("error" not in r for r in results.values()) and not mismatches else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
