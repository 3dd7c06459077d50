"""Measuring a process tree (peak RSS, CPU seconds) and waiting for a quiet machine.

psutil is imported when a monitor starts, so importing this module costs nothing.
"""

from __future__ import annotations

import threading
import time
from typing import Any

__all__ = ["TreeMonitor", "cpu_busy", "proc_stat", "wait_idle"]


class TreeMonitor:
    """Samples the RSS summed over this process and all its descendants.

    Tracks the peak of that sum, the most processes seen at once, and the CPU seconds
    (user + system) of every process seen since ``start()``.
    """

    def __init__(self, interval: float = 0.1) -> None:
        import psutil

        self._psutil = psutil
        self.interval = interval
        self.peak_rss = 0
        self.last_rss = 0  # the last sample's
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
        """Take one sample now."""
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
        self.peak_rss, self.last_rss = max(self.peak_rss, total), total
        self.max_procs = max(self.max_procs, n)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> TreeMonitor:
        """Start sampling in a background thread; CPU seconds count from here."""
        self.sample()
        self._base_cpu = dict(self._cpu)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Take a last sample and stop the thread."""
        self.sample()
        self._stop.set()
        self._thread.join()

    @property
    def cpu_seconds(self) -> float:
        """CPU seconds of the tree since ``start()``."""
        return sum(v - self._base_cpu.get(k, 0.0) for k, v in self._cpu.items())

    @property
    def peak_rss_mb(self) -> float:
        """The peak RSS of the tree in MiB."""
        return self.peak_rss / 2**20


def proc_stat() -> tuple[int, int] | None:
    """(total, idle + iowait) jiffies of all cores from /proc/stat (None where there is none)."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            vals = [int(v) for v in f.readline().split()[1:]]
    except OSError:
        return None
    return sum(vals), vals[3] + vals[4]


def cpu_busy(interval: float = 1.0) -> float | None:
    """Share of all cores busy over ``interval`` seconds (None without /proc/stat)."""
    a = proc_stat()
    time.sleep(interval)
    b = proc_stat()
    if a is None or b is None:
        return None
    return 1.0 - (b[1] - a[1]) / max(1, b[0] - a[0])


def wait_idle(max_wait: float, busy_share: float = 0.15, quiet_s: int = 3) -> float:
    """Wait (at most ``max_wait`` s) until the machine is quiet for ``quiet_s`` seconds.

    Quiet: less than ``busy_share`` of all cores busy. Returns the seconds waited.
    """
    if max_wait <= 0:
        return 0.0
    t0 = time.perf_counter()
    quiet = 0
    while time.perf_counter() - t0 < max_wait:
        busy = cpu_busy()
        if busy is None:
            break
        quiet = quiet + 1 if busy < busy_share else 0
        if quiet >= quiet_s:
            break
    return time.perf_counter() - t0
