#!/usr/bin/env python
"""Benchmark shardwise's parallel backends against multiprocessing and joblib.

Run from the repository root::

    .venv/bin/python benchmarks/bench_parallel.py [--quick] [--only BACKEND ...]

**tiny** (10,000 tasks of ``x * x``: framework overhead) and **heavy** (64 CPU-bound
tasks of ~0.1-0.2 s) on shardwise's ``local``, ``thread``, ``joblib``, ``ray``, ``spark``
and ``dask`` backends and on ``multiprocessing.Pool(2).map`` and ``joblib.Parallel``; see
``benchmarks/README.md``. Writes ``benchmarks/results/parallel.json``
(``parallel-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# Workers of every engine import the task functions from benchmarks/_bench_tasks.py.
if HERE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p
    )
sys.path.insert(0, HERE)
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

import _bench_tasks as tasks  # noqa: E402
from adapters.mp_joblib import MapFn, joblib_parallel, pool_map  # noqa: E402
from adapters.shardwise_parallel import sw_dask, sw_plain, sw_ray, sw_spark  # noqa: E402
from harness.cli import base_parser, chosen  # noqa: E402
from harness.monitor import cpu_busy, wait_idle  # noqa: E402
from harness.report import fmt, machine, markdown, ratio, write_json  # noqa: E402

POOL = "multiprocessing.Pool.map"
CORES = 2
START_TIMEOUT = 240.0  # seconds for an engine to start and answer a warm-up call
RUN_TIMEOUT = 900.0  # seconds for all timings of one backend
CONTESTANTS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[MapFn]]]] = {
    POOL: ("peer", lambda: pool_map(CORES)),
    "joblib.Parallel": ("peer", lambda: joblib_parallel(CORES)),
    "local": ("shardwise", lambda: sw_plain("local", CORES)),
    "thread": ("shardwise", lambda: sw_plain("thread", CORES)),
    "joblib": ("shardwise", lambda: sw_plain("joblib", CORES)),
    "ray": ("shardwise", lambda: sw_ray(CORES)),
    "spark": ("shardwise", lambda: sw_spark(CORES)),
    "dask": ("shardwise", lambda: sw_dask(CORES)),
}


@dataclass
class Result:
    """Timings of one backend (seconds; None when not measured)."""

    backend: str
    kind: str  # "shardwise" or "peer"
    tiny_n: int = 0
    startup_s: float | None = None
    tiny_s: float | None = None
    heavy_s: float | None = None
    tiny_runs: list[float] = field(default_factory=list)
    heavy_runs: list[float] = field(default_factory=list)
    error: str | None = None
    load_avg_1min: float | None = None  # at the start: other work on the machine skews timings
    cpu_busy_before: float | None = None  # share of all cores busy just before the timings

    @property
    def overhead_us(self) -> float | None:
        """Per-task overhead of the tiny set in microseconds."""
        return None if self.tiny_s is None else self.tiny_s / self.tiny_n * 1e6


@contextlib.contextmanager
def deadline(seconds: float, what: str) -> Iterator[None]:
    """Raise TimeoutError in the main thread if the block runs longer than ``seconds``."""

    def _alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"{what} took longer than {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:160]


def _runs(runs: list[float]) -> str:
    return "[" + ", ".join(f"{r:.3f}" for r in runs) + "]"


def timed(
    run: MapFn,
    fn: Callable[[int], int],
    items: list[int],
    repeats: int,
    expected: list[int] | None,
    **kw: Any,
) -> tuple[float, list[float], list[int]]:
    """Median seconds of ``repeats`` maps, the runs, and the last output (checked)."""
    runs: list[float] = []
    out: list[int] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run(fn, items, **kw)
        runs.append(time.perf_counter() - t0)
        if len(out) != len(items) or (expected is not None and out != expected):
            raise RuntimeError(f"wrong results from {fn.__name__}")
    return statistics.median(runs), runs, out


def paired_with_pool(
    run: MapFn, heavy: list[int], repeats: int, expected: list[int]
) -> dict[str, Any]:
    """Heavy set on Pool.map and local alternately, so load from elsewhere hits both alike."""
    pool_runs: list[float] = []
    local_runs: list[float] = []
    with pool_map(CORES) as pool_run:
        pool_run(tasks.square, list(range(8)))
        for _ in range(repeats):
            pool_runs.append(timed(pool_run, tasks.heavy, heavy, 1, expected)[0])
            local_runs.append(timed(run, tasks.heavy, heavy, 1, expected)[0])
    r = statistics.median(local_runs) / statistics.median(pool_runs)
    print(
        f"[local] heavy interleaved with Pool.map: local={_runs(local_runs)} "
        f"pool={_runs(pool_runs)} ratio {r:.2f}x",
        flush=True,
    )
    return {
        "paired_local_heavy_runs": local_runs,
        "paired_pool_heavy_runs": pool_runs,
        "paired_local_vs_pool_heavy": r,
    }


def _time_sets(
    res: Result,
    run: MapFn,
    tiny: list[int],
    heavy: list[int],
    repeats: int,
    reference: dict[str, list[int]],
    extra: dict[str, Any],
) -> None:
    res.tiny_s, res.tiny_runs, _ = timed(run, tasks.square, tiny, repeats, reference["tiny"])
    print(f"[{res.backend}] tiny  {res.tiny_s:.3f} s  runs={_runs(res.tiny_runs)}", flush=True)
    res.heavy_s, res.heavy_runs, out = timed(
        run, tasks.heavy, heavy, repeats, reference.get("heavy")
    )
    reference.setdefault("heavy", out)
    print(f"[{res.backend}] heavy {res.heavy_s:.3f} s  runs={_runs(res.heavy_runs)}", flush=True)
    if res.backend == "local":
        one, runs, _ = timed(run, tasks.heavy, heavy, repeats, reference["heavy"], num_proc=1)
        extra.update(local_heavy_1proc_s=one, local_heavy_1proc_runs=runs)
        print(f"[local] heavy num_proc=1 {one:.3f} s  runs={_runs(runs)}", flush=True)
        extra.update(paired_with_pool(run, heavy, repeats, reference["heavy"]))


def measure(
    name: str,
    tiny: list[int],
    heavy: list[int],
    repeats: int,
    reference: dict[str, list[int]],
    extra: dict[str, Any],
    idle_wait: float,
) -> Result:
    """Start one engine (timed apart), time both sets on it, stop it."""
    kind, factory = CONTESTANTS[name]
    res = Result(name, kind, len(tiny))
    print(f"[{name}] starting", flush=True)
    with contextlib.ExitStack() as stack:
        try:
            with deadline(START_TIMEOUT, f"starting {name}"):
                t0 = time.perf_counter()
                run = stack.enter_context(factory())
                run(tasks.square, list(range(8)))  # warm-up: workers up, modules imported
                res.startup_s = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - one engine must not end the run
            res.error = f"unavailable: {_reason(exc)}"
            print(f"[{name}] {res.error}", flush=True)
            traceback.print_exc(limit=3)
            return res
        wait_idle(idle_wait)
        res.cpu_busy_before, res.load_avg_1min = cpu_busy(), os.getloadavg()[0]
        print(
            f"[{name}] ready in {res.startup_s:.2f} s; machine busy "
            f"{fmt(res.cpu_busy_before, '.0%')} "
            f"(load average {res.load_avg_1min:.2f}) before timing",
            flush=True,
        )
        try:
            with deadline(RUN_TIMEOUT, f"timing {name}"):
                _time_sets(res, run, tiny, heavy, repeats, reference, extra)
        except Exception as exc:  # noqa: BLE001
            res.error = f"error: {_reason(exc)}"
            print(f"[{name}] {res.error}", flush=True)
            traceback.print_exc(limit=5)
    print(f"[{name}] stopped", flush=True)
    return res


def table(results: list[Result]) -> str:
    """The markdown table, ratios against Pool.map of this run."""
    pool = next((r for r in results if r.backend == POOL), None)
    rows: list[list[Any]] = []
    for r in results:
        label = r.backend if r.kind == "peer" else f"shardwise {r.backend}"
        if r.error and r.tiny_s is None:
            rows.append([label, r.error])
            continue
        rows.append(
            [
                label,
                fmt(r.tiny_s, ".3f"),
                fmt(r.overhead_us, ".1f"),
                fmt(r.heavy_s, ".3f"),
                f"{fmt(ratio(r.heavy_s, (pool.heavy_s if pool else None)), '.2f')}x",
                f"{fmt(ratio(r.tiny_s, (pool.tiny_s if pool else None)), '.2f')}x"
                + (f" {r.error}" if r.error else ""),
            ]
        )
    return markdown(
        [
            "backend",
            "tiny total s",
            "per-task overhead µs",
            "heavy total s",
            "ratio heavy vs Pool.map",
            "ratio tiny vs Pool.map",
        ],
        rows,
        right=range(1, 6),
    )


def summary(results: list[Result], extra: dict[str, Any]) -> dict[str, Any]:
    """Print the headline ratios; return them for the JSON."""
    by = {r.backend: r for r in results}
    pool, local = by.get(POOL), by.get("local")
    local_vs_pool = ratio((local.heavy_s if local else None), (pool.heavy_s if pool else None))
    speedup = ratio(extra.get("local_heavy_1proc_s"), (local.heavy_s if local else None))
    print(f"\n{table(results)}\n")
    print(f"local vs Pool.map on CPU-heavy: {fmt(local_vs_pool, '.2f')}x (target <= 1.2x)")
    print(f"speed-up 1->2 cores (local): {fmt(speedup, '.2f')}x")
    if "paired_local_vs_pool_heavy" in extra:
        print(
            f"(cross-check, local and Pool.map timed alternately on CPU-heavy: "
            f"{extra['paired_local_vs_pool_heavy']:.2f}x)"
        )
    print(
        "start-up incl. warm-up call (excluded above): "
        + ", ".join(f"{r.backend} {r.startup_s:.2f} s" for r in results if r.startup_s is not None)
    )
    busiest = max((r.cpu_busy_before or 0.0) for r in results)
    if busiest > 0.15:
        print(
            f"note: {busiest:.0%} of the CPU was busy with other work before a measurement; "
            "the timings may be skewed (see cpu_busy_before in the JSON)"
        )
    return {
        "local_vs_pool_heavy": local_vs_pool,
        "local_vs_pool_heavy_target": 1.2,
        "local_heavy_1proc_s": extra.get("local_heavy_1proc_s"),
        "local_heavy_1proc_runs": extra.get("local_heavy_1proc_runs"),
        "local_heavy_2proc_s": local.heavy_s if local else None,
        "speedup_1_to_2_cores_local": speedup,
        **{k: v for k, v in extra.items() if k.startswith("paired_")},
    }


def main(argv: list[str] | None = None) -> int:
    ap = base_parser(__doc__, "fewer tasks and repeats (smoke run)")
    ap.add_argument("--out", help="JSON output path")
    args = ap.parse_args(argv)
    tiny = list(range(2_000 if args.quick else 10_000))
    heavy = list(range(16 if args.quick else 64))
    repeats = args.repeats or (1 if args.quick else 3)
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 120.0)
    t0 = time.perf_counter()
    tasks.heavy(0)
    one = time.perf_counter() - t0
    print(
        f"python {sys.version.split()[0]}, cpus={os.cpu_count()}, multiprocessing start method="
        f"{mp.get_start_method()}, repeats={repeats} (median)\ntiny: {len(tiny)} x square; heavy: "
        f"{len(heavy)} x "
        f"heavy ({one:.3f} s each here; sequential ~{one * len(heavy):.1f} s, ideal on {CORES} "
        f"cores ~{one * len(heavy) / CORES:.1f} s)",
        flush=True,
    )
    names = chosen(ap, args.only, list(CONTESTANTS), always=[POOL])
    reference = {"tiny": [x * x for x in tiny]}
    extra: dict[str, Any] = {}
    results = [measure(n, tiny, heavy, repeats, reference, extra, idle_wait) for n in names]
    head = summary(results, extra)
    out = (
        Path(args.out)
        if args.out
        else Path(HERE) / "results" / ("parallel-quick.json" if args.quick else "parallel.json")
    )
    write_json(
        out,
        {
            "benchmark": "parallel",
            "quick": args.quick,
            "machine": machine() | {"mp_start_method": mp.get_start_method()},
            "config": {
                "workers": CORES,
                "tiny_tasks": len(tiny),
                "heavy_tasks": len(heavy),
                "heavy_iters": tasks.HEAVY_ITERS,
                "heavy_task_s_in_driver": one,
                "repeats": repeats,
                "statistic": "median",
            },
            "results": [
                {
                    **asdict(r),
                    "overhead_us": r.overhead_us,
                    "ratio_heavy_vs_pool": ratio(
                        r.heavy_s, results[0].heavy_s if results[0].backend == POOL else None
                    ),
                    "ratio_tiny_vs_pool": ratio(
                        r.tiny_s, results[0].tiny_s if results[0].backend == POOL else None
                    ),
                }
                for r in results
            ],
            "summary": head,
        },
        Path(HERE).parent,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
