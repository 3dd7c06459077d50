"""CPUs a process may use: affinity capped by the cgroup's CPU quota (v2 and v1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from shardwise.parallel import cpus
from shardwise.parallel.cpus import cgroup_cpu_limit, cpu_count


def _v2(root: Path, limits: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for path, value in limits.items():
        d = root / path.strip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cpu.max").write_text(value + "\n")
    return root


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("200000 100000", 2),
        ("150000 100000", 2),
        ("50000 100000", 1),
        ("max 100000", None),
        ("garbage", None),
        ("0 100000", None),
        ("1600000 100000", 16),
    ],
)
def test_a_v2_quota_is_whole_cpus_rounded_up(
    tmp_path: Path, value: str, expected: int | None
) -> None:
    root = _v2(tmp_path, {"/": value})
    assert cgroup_cpu_limit(root, own="/") == expected


def test_v2_takes_the_tightest_limit_of_the_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    root = _v2(
        tmp_path,
        {"/": "max 100000", "/kubepods": "300000 100000", "/kubepods/pod1/ctr": "max 100000"},
    )
    assert cgroup_cpu_limit(root, own="/kubepods/pod1/ctr") == 3
    root2 = _v2(tmp_path / "b", {"/kubepods": "800000 100000", "/kubepods/pod1": "100000 100000"})
    assert (
        cgroup_cpu_limit(root2, own="/kubepods/pod1/ctr") == 1
    )  # a missing own file: ancestors still count
    assert cgroup_cpu_limit(root2, own="/elsewhere") is None


@pytest.mark.parametrize(("quota", "expected"), [("-1", None), ("250000", 3), ("100000", 1)])
def test_a_v1_quota_is_read_from_the_cpu_controller(
    tmp_path: Path, quota: str, expected: int | None
) -> None:
    d = tmp_path / "cpu,cpuacct"
    d.mkdir()
    (d / "cpu.cfs_quota_us").write_text(quota + "\n")
    (d / "cpu.cfs_period_us").write_text("100000\n")
    assert cgroup_cpu_limit(tmp_path) == expected


def test_no_cgroup_files_means_no_limit(tmp_path: Path) -> None:
    assert cgroup_cpu_limit(tmp_path) is None
    assert cgroup_cpu_limit(tmp_path / "missing") is None


def test_cpu_count_is_the_affinity_capped_by_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    affinity = len(os.sched_getaffinity(0))
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda: None)
    assert cpu_count() == affinity
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda: 1)
    assert cpu_count() == 1
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda: affinity + 5)
    assert cpu_count() == affinity


def test_the_loader_default_threads_follow_the_quota(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardwise.loader._args import default_threads

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda: 1)
    assert default_threads() == 1
    monkeypatch.setattr(cpus, "cgroup_cpu_limit", lambda: None)
    assert default_threads() == max(1, min(8, len(os.sched_getaffinity(0))))
