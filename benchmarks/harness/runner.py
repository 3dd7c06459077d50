"""Running systems: one subprocess per measured run, rounds alternated, median kept.

The driver side starts ``python bench_<name>.py --worker NAME --worker-kwargs JSON`` in
the system's environment (shardwise's interpreter, or a peer virtualenv that cannot see
the repository); the worker side imports the system's function, calls it and prints its
result as one ``RESULT {json}`` line on stdout.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.monitor import wait_idle

__all__ = ["System", "alternate", "median_run", "run_system", "warm_page_cache", "worker_main"]

#: environment variables every worker gets: quiet, offline peers, no telemetry
QUIET_ENV = {
    "PYTHONUNBUFFERED": "1",
    "RAY_AUTH_MODE": "disabled",
    "RAY_DEDUP_LOGS": "0",
    "RAY_USAGE_STATS_ENABLED": "0",
    "HF_DATASETS_OFFLINE": "1",
    "HF_HUB_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "DASK_DISTRIBUTED__LOGGING__DISTRIBUTED": "error",
}


@dataclass(frozen=True)
class System:
    """One row of a benchmark.

    Attributes:
        name: the row's name (also the ``--only`` name).
        target: ``"module:function"`` run in the worker, e.g. ``"adapters.ray_data:loader"``.
        env: ``"main"`` (shardwise's interpreter) or the key of a peer ``Venv``.
        kind: a free label the benchmark's table uses (``"peer"``, ``"batched"``...).
        kwargs: extra keyword arguments for the target.
    """

    name: str
    target: str
    env: str = "main"
    kind: str = "peer"
    kwargs: tuple[tuple[str, Any], ...] = ()


def worker_main(system: System, **kwargs: Any) -> int:
    """Worker side: run ``system.target(**kwargs, **system.kwargs)``; print its result."""
    module, _, func = system.target.partition(":")
    fn = getattr(importlib.import_module(module), func)
    result = dict(fn(**kwargs, **dict(system.kwargs)))
    result.setdefault("name", system.name)
    result["python"] = sys.executable
    print("RESULT " + json.dumps(result), flush=True)
    return 0


def _tail_reason(log: Path) -> str:
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for ln in reversed(lines):
        if ln.split(":")[0].endswith(("Error", "Exception")):
            return ln[:300]
    return (lines or ["?"])[-1][:300]


def _spawn(
    cmd: list[str], env: dict[str, str], log: Path, timeout: float
) -> tuple[str | None, int]:
    """Run ``cmd`` in its own session; kill whatever it left running afterwards."""
    proc = None
    try:
        with open(log, "w") as lf:
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=lf, text=True, env=env, start_new_session=True
            )
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.communicate()
                return None, -9
        return out, proc.returncode
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, 9)  # Ray or Dask daemons the worker left behind
            except (ProcessLookupError, PermissionError):
                pass


def run_system(
    script: Path,
    system: System,
    python: str,
    *,
    timeout: float,
    logdir: Path,
    idle_wait: float = 0.0,
    worker_kwargs: dict[str, Any] | None = None,
    scratch: Path | None = None,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Driver side: one measured run of ``system`` in a subprocess.

    The worker gets ``worker_kwargs`` plus ``tmp`` (a fresh scratch directory, removed
    afterwards) and ``extra_env`` on top of the environment (e.g. a ``PYTHONPATH`` that
    points a variant at another checkout's sources). Returns the worker's result with
    ``process_s`` (the subprocess's wall time), ``loadavg_1m`` (before, after) and
    ``idle_wait_s``; or ``{"name", "error"}``.
    """
    tmp = Path(
        tempfile.mkdtemp(prefix=f"run-{system.name}-", dir=str(scratch) if scratch else None)
    )
    env = dict(os.environ) | QUIET_ENV
    # as after a pip install: modules compile once and later runs load their bytecode (a
    # shell with PYTHONDONTWRITEBYTECODE=1 made every run compile what it imports lazily)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.update(
        HF_HOME=str(tmp / "hf-home"),
        HF_DATASETS_CACHE=str(tmp / "hf-cache"),
        SHARDWISE_CACHE_DIR=str(tmp / "sw-cache"),
        BENCH_TMP=str(tmp),
    )
    if system.env != "main":
        env.pop("PYTHONPATH", None)  # peers must not see the repository's package
    env.update(extra_env or {})
    kwargs = dict(worker_kwargs or {}) | {"tmp": str(tmp)}
    cmd = [python, str(script), "--worker", system.name, "--worker-kwargs", json.dumps(kwargs)]
    waited = wait_idle(idle_wait)
    load0 = os.getloadavg()[0]
    log = logdir / f"{system.name}.log"
    print(f"--- {system.name} ...", end="", flush=True)
    t0 = time.perf_counter()
    try:
        out, code = _spawn(cmd, env, log, timeout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if out is None:
        print(f" TIMEOUT after {timeout:.0f} s (log: {log})", flush=True)
        return {"name": system.name, "error": f"timeout after {timeout:.0f} s"}
    line = next((ln for ln in out.splitlines() if ln.startswith("RESULT ")), None)
    if line is None:
        reason = _tail_reason(log)
        print(f" FAILED (exit {code}; log: {log}): {reason}", flush=True)
        return {"name": system.name, "error": f"exit {code}: {reason}"}
    res: dict[str, Any] = json.loads(line[len("RESULT ") :])
    res.update(
        process_s=time.perf_counter() - t0,
        idle_wait_s=round(waited, 1),
        loadavg_1m=[round(load0, 2), round(os.getloadavg()[0], 2)],
    )
    return res


def alternate(
    names: Iterable[str], repeats: int, once: Callable[[str], dict[str, Any]]
) -> dict[str, list[dict[str, Any]]]:
    """Run every name once per round, ``repeats`` rounds, so load from other work on the
    machine hits all rows alike. A name that failed is not run again."""
    names = list(names)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    precompile()
    for rep in range(repeats):
        if repeats > 1:
            print(f"round {rep + 1}/{repeats}", flush=True)
        for name in names:
            if runs[name] and runs[name][-1].get("error"):
                continue
            runs[name].append(once(name))
    return runs


def precompile() -> None:
    """Compile shardwise's sources (those the runs import, through ``PYTHONPATH`` or the
    installed package) to bytecode once, as ``pip install`` does, so no measured run pays
    for compiling the modules it imports."""
    import compileall

    import shardwise

    for root in {*os.environ.get("PYTHONPATH", "").split(os.pathsep), *shardwise.__path__}:
        if root and Path(root).is_dir():
            compileall.compile_dir(root, quiet=2, workers=1)


def median_run(
    runs: list[dict[str, Any]], key: str, higher_is_better: bool = False
) -> dict[str, Any]:
    """The run whose ``key`` is the median of the successful runs (the better one of the two
    middle runs), with ``runs_<key>`` listing all of them and ``failed_runs`` the errors.

    When every run failed, the last failure is returned.
    """
    good = [r for r in runs if not r.get("error")]
    if not good:
        return runs[-1]
    ordered = sorted(good, key=lambda r: r[key], reverse=higher_is_better)
    best = dict(ordered[(len(ordered) - 1) // 2])
    best[f"runs_{key}"] = [r[key] for r in good]
    best["median_of"] = len(good)
    best["failed_runs"] = [r["error"] for r in runs if r.get("error")]
    if len(good) % 2 == 0:  # the statistic itself is the true median
        best[key] = statistics.median(r[key] for r in good)
    return best


def warm_page_cache(files: Iterable[Path]) -> None:
    """Read ``files`` once so that no system pays for the first read from disk."""
    for f in files:
        with open(f, "rb") as fh:
            while fh.read(1 << 24):
                pass
