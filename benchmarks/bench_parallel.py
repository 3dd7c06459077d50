#!/usr/bin/env python
"""Benchmark shardwise's parallel backends against multiprocessing and joblib.

Run from the repository root::

    .venv/bin/python benchmarks/bench_parallel.py [--quick]

One run measures, on every backend:

* **tiny**: 10,000 tasks of ``x * x`` -- the time is almost all framework overhead;
* **heavy**: 64 CPU-bound pure-Python tasks of ~0.1-0.2 s each;

on shardwise's ``local`` (2 processes), ``thread``, ``joblib`` (loky), ``ray``, ``spark``
and ``dask`` backends through ``parallel_map``, and on the peers
``multiprocessing.Pool(2).map`` and ``joblib.Parallel(n_jobs=2)``. Each engine is started
inside this script and stopped before the next one starts, so they never compete for the
two cores. Start-up and one small warm-up call are timed separately and excluded; each
timing is the median of several repeats. The ``local`` backend is also run with one
process on the heavy set to measure the speed-up from one to two cores.

Prints a markdown table and writes JSON to ``benchmarks/results/parallel.json``
(``parallel-quick.json`` with ``--quick``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import platform
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
# Workers of every engine import the task functions from benchmarks/_bench_tasks.py.
if HERE not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (HERE, os.environ.get("PYTHONPATH", "")) if p)
if HERE not in sys.path:
    sys.path.insert(0, HERE)
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable

import _bench_tasks as tasks  # noqa: E402

POOL = "multiprocessing.Pool.map"
JOBLIB_PEER = "joblib.Parallel"
CORES = 2
START_TIMEOUT = 240.0  # seconds for an engine to start and answer a warm-up call
RUN_TIMEOUT = 900.0  # seconds for all timings of one backend

MapFn = Callable[..., list[Any]]


@dataclass
class Result:
    """Timings of one backend (seconds; None when not measured)."""

    backend: str
    kind: str  # "shardwise" or "peer"
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
        return None if self.tiny_s is None else self.tiny_s / TINY_N * 1e6


TINY_N = 10_000  # set from the command line in main()


# -- helpers -----------------------------------------------------------------------------


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


def _cpu_busy(interval: float = 1.0) -> float | None:
    """Share of all cores busy over ``interval`` seconds (from /proc/stat; None elsewhere)."""

    def snap() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
        return sum(vals), vals[3] + vals[4]  # total, idle + iowait

    try:
        t0, i0 = snap()
        time.sleep(interval)
        t1, i1 = snap()
    except OSError:
        return None
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_idle(max_wait: float, threshold: float = 0.15) -> float | None:
    """Wait (up to ``max_wait`` s) until the machine is quiet for 3 s; return the last busy share."""
    busy = _cpu_busy() if max_wait > 0 else None
    start, quiet = time.monotonic(), 0
    while busy is not None and time.monotonic() - start < max_wait:
        quiet = quiet + 1 if busy < threshold else 0
        if quiet >= 3:
            break
        busy = _cpu_busy()
    return busy


def _reason(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first[:160]


def _timed(run: MapFn, fn: Callable[[int], int], items: list[int], repeats: int,
           expected: list[int] | None, **kw: Any) -> tuple[float, list[float], list[int]]:
    runs: list[float] = []
    out: list[int] = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run(fn, items, **kw)
        runs.append(time.perf_counter() - t0)
        if len(out) != len(items) or (expected is not None and out != expected):
            raise RuntimeError(f"wrong results from {fn.__name__}")
    return statistics.median(runs), runs, out


# -- contestants: each a context manager yielding map(fn, items, **kw) -------------------


@contextlib.contextmanager
def pool_map() -> Iterator[MapFn]:
    pool = mp.Pool(CORES)
    try:
        yield lambda fn, items: pool.map(fn, items)
    finally:
        pool.close()
        pool.join()


@contextlib.contextmanager
def joblib_parallel() -> Iterator[MapFn]:
    from joblib import Parallel, delayed

    try:
        yield lambda fn, items: Parallel(n_jobs=CORES)(delayed(fn)(x) for x in items)
    finally:
        _stop_loky()


def _stop_loky() -> None:
    """Stop loky's reusable worker pool, which otherwise idles on for minutes."""
    with contextlib.suppress(Exception):
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor().shutdown(wait=True, kill_workers=True)


def _shardwise(backend: Any) -> MapFn:
    from shardwise.parallel import parallel_map

    def run(fn: Callable[[int], int], items: list[int], **kw: Any) -> list[Any]:
        return parallel_map(fn, items, backend=backend, progress=False, **kw)

    return run


@contextlib.contextmanager
def sw_plain(name: str) -> Iterator[MapFn]:
    from shardwise.parallel import get_backend

    backend = get_backend(name, CORES)
    try:
        yield _shardwise(backend)
    finally:
        backend.close()
        if name == "joblib":
            _stop_loky()


@contextlib.contextmanager
def sw_ray() -> Iterator[MapFn]:
    import ray

    from shardwise.parallel import get_backend

    tmp = tempfile.mkdtemp(prefix="swbr", dir="/tmp")
    backend = None
    try:
        ray.init(num_cpus=CORES, include_dashboard=False, _temp_dir=tmp,
                 _node_ip_address="127.0.0.1", log_to_driver=False)
        backend = get_backend("ray")
        yield _shardwise(backend)
    finally:
        if backend is not None:
            backend.close()
        with contextlib.suppress(Exception):
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def sw_spark() -> Iterator[MapFn]:
    from pyspark.sql import SparkSession

    from shardwise.parallel import get_backend

    spark = None
    backend = None
    try:
        spark = (
            SparkSession.builder.master(f"local[{CORES}]")
            .appName("shardwise-bench")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        backend = get_backend("spark", spark=spark)
        yield _shardwise(backend)
    finally:
        if backend is not None:
            backend.close()
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()


@contextlib.contextmanager
def sw_dask() -> Iterator[MapFn]:
    from distributed import Client, LocalCluster

    from shardwise.parallel import get_backend

    cluster = client = backend = None
    try:
        cluster = LocalCluster(n_workers=CORES, threads_per_worker=1, processes=True,
                               host="127.0.0.1", dashboard_address=None)
        client = Client(cluster)
        backend = get_backend("dask", client=client)
        yield _shardwise(backend)
    finally:
        if backend is not None:
            backend.close()
        for obj in (client, cluster):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()


CONTESTANTS: list[tuple[str, str, Callable[[], contextlib.AbstractContextManager[MapFn]]]] = [
    (POOL, "peer", pool_map),
    (JOBLIB_PEER, "peer", joblib_parallel),
    ("local", "shardwise", lambda: sw_plain("local")),
    ("thread", "shardwise", lambda: sw_plain("thread")),
    ("joblib", "shardwise", lambda: sw_plain("joblib")),
    ("ray", "shardwise", sw_ray),
    ("spark", "shardwise", sw_spark),
    ("dask", "shardwise", sw_dask),
]


# -- the run -----------------------------------------------------------------------------


def measure(name: str, kind: str, factory: Callable[[], Any], tiny: list[int], heavy: list[int],
            repeats: int, reference: dict[str, list[int]], extra: dict[str, Any],
            idle_wait: float) -> Result:
    res = Result(name, kind)
    print(f"[{name}] starting", flush=True)
    with contextlib.ExitStack() as stack:
        try:
            with deadline(START_TIMEOUT, f"starting {name}"):
                t0 = time.perf_counter()
                run = stack.enter_context(factory())
                run(tasks.square, list(range(8)))  # warm-up: workers up, modules imported
                res.startup_s = time.perf_counter() - t0
        except BaseException as exc:  # noqa: BLE001 - one engine must not end the run
            if isinstance(exc, KeyboardInterrupt):
                raise
            res.error = f"unavailable: {_reason(exc)}"
            print(f"[{name}] {res.error}", flush=True)
            traceback.print_exc(limit=3)
            return res
        res.cpu_busy_before = wait_idle(idle_wait)
        res.load_avg_1min = os.getloadavg()[0]
        busy = "-" if res.cpu_busy_before is None else f"{res.cpu_busy_before:.0%}"
        print(f"[{name}] ready in {res.startup_s:.2f} s; machine busy {busy} (load average "
              f"{res.load_avg_1min:.2f}) before timing", flush=True)
        try:
            with deadline(RUN_TIMEOUT, f"timing {name}"):
                res.tiny_s, res.tiny_runs, _ = _timed(run, tasks.square, tiny, repeats, reference["tiny"])
                print(f"[{name}] tiny  {res.tiny_s:.3f} s  runs={_fmt(res.tiny_runs)}", flush=True)
                res.heavy_s, res.heavy_runs, out = _timed(run, tasks.heavy, heavy, repeats,
                                                          reference.get("heavy"))
                reference.setdefault("heavy", out)
                print(f"[{name}] heavy {res.heavy_s:.3f} s  runs={_fmt(res.heavy_runs)}", flush=True)
                if name == "local":
                    one, runs, _ = _timed(run, tasks.heavy, heavy, repeats, reference["heavy"], num_proc=1)
                    extra["local_heavy_1proc_s"] = one
                    extra["local_heavy_1proc_runs"] = runs
                    print(f"[{name}] heavy num_proc=1 {one:.3f} s  runs={_fmt(runs)}", flush=True)
                    extra.update(paired_with_pool(run, heavy, repeats, reference["heavy"]))
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            res.error = f"error: {_reason(exc)}"
            print(f"[{name}] {res.error}", flush=True)
            traceback.print_exc(limit=5)
    print(f"[{name}] stopped", flush=True)
    return res


def paired_with_pool(run: MapFn, heavy: list[int], repeats: int, expected: list[int]) -> dict[str, Any]:
    """Heavy set on Pool.map and local alternately, so load from elsewhere hits both alike."""
    pool_runs: list[float] = []
    local_runs: list[float] = []
    with pool_map() as pool_run:
        pool_run(tasks.square, list(range(8)))
        for _ in range(repeats):
            pool_runs.append(_timed(pool_run, tasks.heavy, heavy, 1, expected)[0])
            local_runs.append(_timed(run, tasks.heavy, heavy, 1, expected)[0])
    ratio = statistics.median(local_runs) / statistics.median(pool_runs)
    print(f"[local] heavy interleaved with Pool.map: local={_fmt(local_runs)} pool={_fmt(pool_runs)} "
          f"ratio {ratio:.2f}x", flush=True)
    return {"paired_local_heavy_runs": local_runs, "paired_pool_heavy_runs": pool_runs,
            "paired_local_vs_pool_heavy": ratio}


def _fmt(runs: list[float]) -> str:
    return "[" + ", ".join(f"{r:.3f}" for r in runs) + "]"


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def table(results: list[Result]) -> str:
    pool = next((r for r in results if r.backend == POOL), None)
    lines = [
        "| backend | tiny total s | per-task overhead µs | heavy total s "
        "| ratio heavy vs Pool.map | ratio tiny vs Pool.map |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        label = r.backend if r.kind == "peer" else f"shardwise {r.backend}"
        if r.error and r.tiny_s is None:
            cell = r.error.replace("|", "/")
            lines.append(f"| {label} | {cell} | | | | |")
            continue
        rh = _ratio(r.heavy_s, pool.heavy_s if pool else None)
        rt = _ratio(r.tiny_s, pool.tiny_s if pool else None)
        lines.append(
            f"| {label} | {_num(r.tiny_s, '.3f')} | {_num(r.overhead_us, '.1f')} "
            f"| {_num(r.heavy_s, '.3f')} | {_num(rh, '.2f')}x | {_num(rt, '.2f')}x |"
            + (f" {r.error}" if r.error else "")
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    global TINY_N
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer tasks and repeats (smoke run)")
    ap.add_argument("--repeats", type=int, help="timings per measurement (median is kept)")
    ap.add_argument("--only", nargs="+", metavar="BACKEND",
                    help=f"measure only these (always with {POOL!r} as the baseline)")
    ap.add_argument("--out", help="JSON output path")
    ap.add_argument("--idle-wait", type=float, metavar="SECONDS",
                    help="before each backend's timings wait up to this long for the machine to "
                    "be idle (default 120, 0 with --quick)")
    args = ap.parse_args(argv)

    TINY_N = 2_000 if args.quick else 10_000
    n_heavy = 16 if args.quick else 64
    repeats = args.repeats or (1 if args.quick else 3)
    out_path = args.out or os.path.join(HERE, "results", "parallel-quick.json" if args.quick else "parallel.json")
    tiny = list(range(TINY_N))
    heavy = list(range(n_heavy))

    t0 = time.perf_counter()
    tasks.heavy(0)
    one_task = time.perf_counter() - t0
    print(f"python {platform.python_version()}, cpus={os.cpu_count()}, "
          f"multiprocessing start method={mp.get_start_method()}, repeats={repeats} (median)")
    print(f"tiny: {TINY_N} x square; heavy: {n_heavy} x heavy ({one_task:.3f} s each here; "
          f"sequential ~{one_task * n_heavy:.1f} s, ideal on {CORES} cores ~{one_task * n_heavy / CORES:.1f} s)",
          flush=True)

    chosen = CONTESTANTS
    if args.only:
        wanted = set(args.only) | {POOL}
        unknown = wanted - {c[0] for c in CONTESTANTS}
        if unknown:
            ap.error(f"unknown backends {sorted(unknown)}; choose from {[c[0] for c in CONTESTANTS]}")
        chosen = [c for c in CONTESTANTS if c[0] in wanted]

    reference = {"tiny": [x * x for x in tiny]}
    extra: dict[str, Any] = {}
    idle_wait = args.idle_wait if args.idle_wait is not None else (0.0 if args.quick else 120.0)
    results = [measure(n, k, f, tiny, heavy, repeats, reference, extra, idle_wait) for n, k, f in chosen]

    by_name = {r.backend: r for r in results}
    pool, local = by_name.get(POOL), by_name.get("local")
    local_vs_pool = _ratio(local.heavy_s if local else None, pool.heavy_s if pool else None)
    speedup = _ratio(extra.get("local_heavy_1proc_s"), local.heavy_s if local else None)

    print()
    print(table(results))
    print()
    print(f"local vs Pool.map on CPU-heavy: {_num(local_vs_pool, '.2f')}x (target <= 1.2x)")
    print(f"speed-up 1->2 cores (local): {_num(speedup, '.2f')}x")
    if "paired_local_vs_pool_heavy" in extra:
        print(f"(cross-check, local and Pool.map timed alternately on CPU-heavy: "
              f"{extra['paired_local_vs_pool_heavy']:.2f}x)")
    startups = ", ".join(f"{r.backend} {r.startup_s:.2f} s" for r in results if r.startup_s is not None)
    print(f"start-up incl. warm-up call (excluded above): {startups}")
    busiest = max((r.cpu_busy_before or 0.0) for r in results)
    if busiest > 0.15:
        print(f"note: {busiest:.0%} of the CPU was busy with other work before a measurement; "
              "the timings may be skewed (see cpu_busy_before in the JSON)")

    report = {
        "benchmark": "parallel",
        "quick": args.quick,
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpu_count": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "mp_start_method": mp.get_start_method(),
        },
        "config": {
            "workers": CORES,
            "tiny_tasks": TINY_N,
            "heavy_tasks": n_heavy,
            "heavy_iters": tasks.HEAVY_ITERS,
            "heavy_task_s_in_driver": one_task,
            "repeats": repeats,
            "statistic": "median",
        },
        "results": [
            {**asdict(r), "overhead_us": r.overhead_us,
             "ratio_heavy_vs_pool": _ratio(r.heavy_s, pool.heavy_s if pool else None),
             "ratio_tiny_vs_pool": _ratio(r.tiny_s, pool.tiny_s if pool else None)}
            for r in results
        ],
        "summary": {
            "local_vs_pool_heavy": local_vs_pool,
            "local_vs_pool_heavy_target": 1.2,
            "local_heavy_1proc_s": extra.get("local_heavy_1proc_s"),
            "local_heavy_1proc_runs": extra.get("local_heavy_1proc_runs"),
            "local_heavy_2proc_s": local.heavy_s if local else None,
            "speedup_1_to_2_cores_local": speedup,
            **{k: v for k, v in extra.items() if k.startswith("paired_")},
        },
    }
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=2)
        f.write("\n")
    print(f"wrote {os.path.relpath(out_path)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
