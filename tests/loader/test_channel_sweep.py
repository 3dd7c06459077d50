"""Channel files of killed processes are removed by the next channel made; a live owner's
files, fresh files of the old naming and files whose owner cannot be checked are kept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from shardwise.loader import channel, channel_sweep
from shardwise.loader.channel import TopologyChannel
from shardwise.loader.channel_sweep import STALE_AFTER, pid_namespace, sweep, sweep_once
from shardwise.storage.cache.lease import boot_id, is_alive, owner_id, start_time

DAY_AGO = time.time() - STALE_AFTER - 3600
SIBLINGS = ("", ".control", ".pass.77.0.1", ".control.99.tmp", ".pass.77.0.1.99.tmp", ".5.tmp")

# a process that makes a channel in argv[1], writes all its files, says where, then waits
CHILD = """
import sys, time
from shardwise.loader import channel
channel._root = lambda: sys.argv[1]
c = channel.TopologyChannel.new()
c.announce(1, 2, 0)
c.publish({"n": 1, "epoch": 0, "resumes": []})
c.record_pass("1.0.0", 1, 0)
open(c.path + ".control.12345.tmp", "w").close()  # a write the kill interrupts
print(c.path, flush=True)
time.sleep(120)
"""


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A channel directory of the test's own; the next ``new()`` sweeps it."""
    monkeypatch.setattr(channel, "_root", lambda: str(tmp_path))
    monkeypatch.setattr(channel_sweep, "_swept_in", None)
    return tmp_path


@pytest.fixture
def sleeper() -> Iterator[int]:
    """The pid of a live process other than this one."""
    p = subprocess.Popen(["sleep", "300"])
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def _dead_pid() -> int:
    p = subprocess.Popen(["true"])
    p.wait()
    return p.pid


def _channel(root: Path, owner: str | None, ns: str | None = None, age: float = 0.0) -> Path:
    """A channel's files (every sibling kind) named by ``owner``; the old naming if None."""
    rid = uuid.uuid4().hex
    named = rid if owner is None else f"{owner}-p{ns or pid_namespace()}-{rid}"
    base = root / f"shardwise-topology-{named}.json"
    for suffix in SIBLINGS:
        path = Path(f"{base}{suffix}")
        path.write_text("{}")
        os.utime(path, (time.time() - age, time.time() - age))
    return base


def _files(base: Path) -> list[Path]:
    return sorted(base.parent.glob(f"{base.name}*"))


def test_a_channel_is_named_by_its_creator(root: Path) -> None:
    path = Path(TopologyChannel.new().path)
    match = channel_sweep._BASE.fullmatch(path.name)
    assert path.parent == root and match is not None
    assert match.group("owner") == owner_id() and is_alive(match.group("owner"))
    assert match.group("owner").split("-")[1] == str(os.getpid())
    assert match.group("ns") == pid_namespace()


def test_a_killed_creators_channel_goes_with_the_next_new(root: Path) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(root)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    base = Path(child.stdout.readline().strip())
    assert len(_files(base)) == 4  # the topology, the control, a pass record, a tmp file
    assert f"-{child.pid}-" in base.name
    os.kill(child.pid, signal.SIGKILL)
    child.wait()
    made = Path(TopologyChannel.new().path)
    assert _files(base) == []
    made.write_text("{}")
    assert list(root.iterdir()) == [made]


def test_a_live_owners_channel_is_kept_however_old(root: Path, sleeper: int) -> None:
    live = f"{boot_id()}-{sleeper}-{start_time(sleeper)}"
    recycled = f"{boot_id()}-{sleeper}-{(start_time(sleeper) or 0) + 1}"
    dead = f"{boot_id()}-{_dead_pid()}-1"
    kept = [_channel(root, live, age=STALE_AFTER * 3), _channel(root, owner_id(), age=1e6)]
    gone = [_channel(root, recycled), _channel(root, dead)]
    TopologyChannel.new()
    for base in kept:
        assert len(_files(base)) == len(SIBLINGS)
    for base in gone:
        assert _files(base) == []


def test_old_names_go_after_a_day_without_a_write(root: Path) -> None:
    old = _channel(root, None, age=STALE_AFTER + 3600)
    fresh = _channel(root, None, age=STALE_AFTER - 3600)
    Path(f"{old}.pass.1.0.0").write_text("{}")  # written just now: the channel is in use
    older = _channel(root, None, age=STALE_AFTER + 60)
    removed = sweep(str(root))
    assert _files(older) == [] and len(removed) == len(SIBLINGS)
    assert len(_files(fresh)) == len(SIBLINGS)
    assert len(_files(old)) == len(SIBLINGS) + 1


def test_unverifiable_owners_follow_the_age_rule(root: Path) -> None:
    other_boot = f"{'f' * 16 if boot_id() != 'f' * 16 else 'e' * 16}-1-1"
    dead = f"{boot_id()}-{_dead_pid()}-1"
    began = channel_sweep._boot_time()
    assert began is not None  # Linux: /proc/stat says when this boot began
    foreign_host = _channel(root, other_boot)  # written during this boot: another host's
    earlier_boot = _channel(root, other_boot, age=time.time() - began + 3600)
    other_ns = _channel(root, dead, ns="1")  # another container's pid: not checked
    other_ns_old = _channel(root, dead, ns="1", age=STALE_AFTER + 60)
    sweep(str(root))
    assert len(_files(foreign_host)) == len(_files(other_ns)) == len(SIBLINGS)
    assert _files(earlier_boot) == [] and _files(other_ns_old) == []


def test_a_process_sweeps_once(root: Path) -> None:
    TopologyChannel.new()
    dead = _channel(root, f"{boot_id()}-{_dead_pid()}-1")
    TopologyChannel.new()
    assert len(_files(dead)) == len(SIBLINGS)
    assert len(sweep(str(root))) == len(SIBLINGS)


def test_sweep_failures_do_not_raise(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dead = f"{boot_id()}-{_dead_pid()}-1"
    stuck = root / f"shardwise-topology-{dead}-p{pid_namespace()}-{uuid.uuid4().hex}.json"
    stuck.mkdir()  # unlink fails on it
    gone = _channel(root, dead)
    files = [str(p) for p in _files(gone)]
    assert sorted(sweep(str(root))) == files
    assert stuck.is_dir() and _files(gone) == []
    sweep_once(str(root / "missing"))
    monkeypatch.setattr(channel_sweep, "_swept_in", None)

    def unreadable(path: object) -> None:
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(channel_sweep.os, "scandir", unreadable)
    assert Path(TopologyChannel.new().path).parent == root
