"""The CPUs this process may use: its CPU affinity, capped by its cgroup's CPU quota.

A container started with ``--cpus=2`` (Docker) or a CPU limit of 2 (Kubernetes) on a
64-core host still sees 64 CPUs in ``os.cpu_count()`` and in its affinity mask; only the
cgroup's quota says that the kernel lets it run for two CPUs' worth of time per period.
Starting 64 worker processes (or decoding threads) there makes them wait their turn and
multiplies the memory for nothing. So the count here is the smaller of the affinity and
the quota rounded up, read from cgroup v2 (``cpu.max`` of the process's cgroup and of its
ancestors) or v1 (``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``). Anything unreadable
counts as no limit.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

__all__ = ["cgroup_cpu_limit", "cpu_count"]

CGROUP_ROOT = Path("/sys/fs/cgroup")
V1_DIRS = ("cpu", "cpu,cpuacct", "cpuacct,cpu")


def cpu_count() -> int:
    """CPUs this process may use: its affinity (all CPUs where there is none), capped
    by its cgroup's CPU quota."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    limit = cgroup_cpu_limit()
    return max(1, min(cpus, limit)) if limit is not None else max(1, cpus)


def cgroup_cpu_limit(root: Path = CGROUP_ROOT, own: str | None = None) -> int | None:
    """The CPU quota of this process's cgroup in whole CPUs (rounded up), or None when
    there is none or it cannot be read.

    Args:
        root: where the cgroup filesystem is mounted.
        own: the process's cgroup v2 path (default: read from ``/proc/self/cgroup``).
    """
    if (root / "cgroup.controllers").exists():  # cgroup v2
        path = own if own is not None else _own_v2_path()
        limits = [_v2_limit(d) for d in _with_ancestors(root, path)]
        found = [x for x in limits if x is not None]
        return min(found) if found else None
    for name in V1_DIRS:
        quota, period = (
            _read(root / name / "cpu.cfs_quota_us"),
            _read(root / name / "cpu.cfs_period_us"),
        )
        if quota is not None and period is not None:
            return _whole_cpus(quota, period)
    return None


def _own_v2_path() -> str:
    text = _read(Path("/proc/self/cgroup")) or ""
    for line in text.splitlines():
        if line.startswith("0::"):
            return line[3:]
    return "/"


def _with_ancestors(root: Path, path: str) -> list[Path]:
    parts = [p for p in path.split("/") if p and p not in (".", "..")]
    return [root.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _v2_limit(cgroup: Path) -> int | None:
    fields = (_read(cgroup / "cpu.max") or "").split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    return _whole_cpus(fields[0], fields[1])


def _whole_cpus(quota: str, period: str) -> int | None:
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return max(1, math.ceil(q / p)) if q > 0 and p > 0 else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
