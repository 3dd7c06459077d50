"""Helpers shared by the benchmark scripts (stdlib only; psutil is imported when used).

The scripts run their systems in subprocesses, some in other virtualenvs; each such
subprocess re-runs its script, which finds this module beside it on ``sys.path``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["TreeMonitor", "ensure_venv", "reusable", "run_worker", "wait_idle"]


class TreeMonitor:
    """Samples RSS summed over this process and all its descendants; tracks the peak
    and the CPU seconds (user + system) of every process seen."""

    def __init__(self, interval: float = 0.1) -> None:
        import psutil

        self._psutil = psutil
        self.interval = interval
        self.peak_rss = 0
        self.max_procs = 0
        self._cpu: dict[tuple[int, float], float] = {}
        self._base_cpu: dict[tuple[int, float], float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-monitor", daemon=True)

    def _procs(self) -> list[Any]:
        me = self._psutil.Process()
        try:
            return [me, *me.children(recursive=True)]
        except self._psutil.Error:
            return [me]

    def sample(self) -> None:
        total, n = 0, 0
        for p in self._procs():
            try:
                with p.oneshot():
                    rss = p.memory_info().rss
                    t = p.cpu_times()
                    key = (p.pid, p.create_time())
            except self._psutil.Error:
                continue
            total += rss
            n += 1
            self._cpu[key] = t.user + t.system
        self.peak_rss = max(self.peak_rss, total)
        self.max_procs = max(self.max_procs, n)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> TreeMonitor:
        self.sample()
        self._base_cpu = dict(self._cpu)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.sample()
        self._stop.set()
        self._thread.join()

    @property
    def cpu_seconds(self) -> float:
        return sum(v - self._base_cpu.get(k, 0.0) for k, v in self._cpu.items())


def wait_idle(max_wait: float, busy_pct: float = 30.0, quiet_s: int = 3) -> float:
    """Wait (at most ``max_wait`` s) until other processes use less than ``busy_pct`` of
    the machine for ``quiet_s`` consecutive seconds; returns the seconds waited."""
    if max_wait <= 0:
        return 0.0
    import psutil

    t0 = time.perf_counter()
    quiet = 0
    psutil.cpu_percent(None)
    while time.perf_counter() - t0 < max_wait:
        quiet = quiet + 1 if psutil.cpu_percent(1.0) < busy_pct else 0
        if quiet >= quiet_s:
            break
    return time.perf_counter() - t0


def ensure_venv(venv: Path, packages: list[str], modules: list[str]) -> dict[str, str]:
    """Create the peers' virtualenv ``venv`` with ``packages`` unless ``modules`` already
    import there; return the installed version of each module's distribution."""
    py = venv / "bin" / "python"
    check = ("import importlib, json; from importlib.metadata import version; "
             f"mods = {modules!r}; [importlib.import_module(m) for m in mods]; "
             "print(json.dumps({m: version(m) for m in mods}))")
    if py.exists():
        r = subprocess.run([str(py), "-c", check], capture_output=True, text=True)
        if r.returncode == 0:
            return json.loads(r.stdout.strip().splitlines()[-1])
        print(f"peers: {venv.name} is incomplete; installing", flush=True)
    else:
        print(f"peers: creating {venv} (a few minutes)", flush=True)
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)], check=True)
    (venv / ".gitignore").write_text("*\n")
    subprocess.run([str(py), "-m", "pip", "install", "-q", *packages], check=True)
    r = subprocess.run([str(py), "-c", check], capture_output=True, text=True, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def reusable(out: Path, version: int, **expected: Any) -> bool:
    """Whether generated data in ``out`` can be reused: its ``meta.json`` has this
    ``version`` and the ``expected`` values (e.g. ``rows=...``)."""
    meta_path = out / "meta.json"
    if not meta_path.exists():
        return False
    meta = json.loads(meta_path.read_text())
    if meta.get("version") != version or any(meta.get(k) != v for k, v in expected.items()):
        return False
    print(f"data: reusing {out}", flush=True)
    return True


def run_worker(cmd: list[str], env: dict[str, str], cwd: Path, log: Path, timeout: float,
               name: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Run one measured subprocess (its own session, stderr to ``log``) and return
    ``(result, None)`` with the JSON it printed on a ``RESULT `` line, or ``(None, error)``
    after a timeout or a failure (the log's tail printed). Whatever the subprocess left
    running in its session (Ray, Dask daemons) is killed afterwards."""
    proc = None
    try:
        with open(log, "w") as lf:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=lf, text=True, env=env, cwd=str(cwd),
                                    start_new_session=True)
            try:
                out, _ = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, 9)
                proc.communicate()
                print(f" TIMEOUT after {timeout:.0f} s (log: {log})", flush=True)
                return None, {"name": name, "error": f"timeout after {timeout:.0f} s"}
        for line in out.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):]), None
        tail = log.read_text()[-3000:]
        print(f" FAILED (exit {proc.returncode}; log: {log})\n{tail}", flush=True)
        last = [ln for ln in tail.splitlines() if ln.strip()][-1:] or [""]
        return None, {"name": name, "error": f"exit {proc.returncode}: {last[0].strip()[:300]}",
                      "log_tail": tail[-1500:]}
    finally:
        if proc is not None:
            try:
                os.killpg(proc.pid, 9)
            except (ProcessLookupError, PermissionError):
                pass
