"""Topology channel files left behind by killed processes, found and removed.

A dataset's channel (:mod:`shardwise.loader.channel`) is a few small files in ``/dev/shm``
(or the temp directory) that its finalizer removes on a normal exit; a process killed by
``SIGKILL``, the OOM killer or a crashed test leaves them. So a channel's name carries its
creator, the owner: ``shardwise-topology-<owner>-p<pid namespace>-<random id>.json``, where
``<owner>`` is :func:`~shardwise.storage.cache.lease.owner_id` (boot id, pid and the pid's
start time, so a recycled pid or a later boot is not mistaken for the creator) and the pid
namespace tells whose pids those are (containers started with ``--ipc=host`` share
``/dev/shm`` but not their pids). Siblings share the name and add a suffix: ``.control``,
``.pass.<slot>`` and the ``.<pid>.tmp`` files of interrupted writes.

When a process creates its first channel, :func:`sweep` looks once through the directory
and removes every channel (the file and all its siblings) that is stale by these rules:

- named by an owner of this boot and this pid namespace: stale when that owner is not
  running (:func:`~shardwise.storage.cache.lease.is_alive`); a running owner's channel is
  never removed, however old, and neither is this process's own;
- named by an owner of another boot: stale when none of its files was written since this
  boot began (it is an earlier boot's); otherwise it is the copy of a dataset pickled from
  another host, and the next rule applies;
- named by an owner of another pid namespace, or by none (the old naming, a bare random
  id): the owner cannot be checked, so stale only when none of its files was modified in
  the last :data:`STALE_AFTER` seconds (a day).

The owner is the process that created the channel; DataLoader workers (forked or spawned)
and copies of the dataset pickled to other processes use the creator's files under its
name. A copy that outlives its creator on the same host loses its channel to a sweep; the
sweep never raises (cleanup must not break a dataset).
"""

from __future__ import annotations

import os
import re
import time
from functools import lru_cache

from shardwise.storage.cache.lease import boot_id, is_alive, owner_id

__all__ = ["STALE_AFTER", "channel_name", "sweep", "sweep_once"]

STALE_AFTER = 24 * 3600.0  # seconds without a write before an unverifiable channel is stale

_CLOCK_STEP = 600.0  # the boot time read from /proc moves with steps of the wall clock
PREFIX = "shardwise-topology-"
# the channel's base name; its siblings add a suffix after ".json"
_BASE = re.compile(
    r"shardwise-topology-(?:(?P<owner>[0-9a-z]+-\d+-\d+)-p(?P<ns>\d+)-)?[0-9a-f]{32}\.json"
)

_swept_in: int | None = None  # the pid of the process that swept last


@lru_cache(maxsize=1)
def pid_namespace() -> str:
    """This process's pid namespace (its inode number), ``"0"`` where ``/proc`` does not
    say."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def channel_name(random_id: str) -> str:
    """The file name of a new channel of this process (its owner) with ``random_id``."""
    return f"{PREFIX}{owner_id()}-p{pid_namespace()}-{random_id}.json"


def sweep_once(root: str) -> None:
    """:func:`sweep` ``root``, at most once per process (a forked child sweeps again);
    never raises."""
    global _swept_in
    if _swept_in == os.getpid():
        return
    _swept_in = os.getpid()
    try:
        sweep(root)
    except Exception:  # noqa: BLE001 - best-effort cleanup: never break a dataset
        pass


def sweep(root: str, now: float | None = None) -> list[str]:
    """Remove the stale channels in ``root`` (the rules are the module's); returns the
    paths removed. Files that cannot be listed, read or removed are left alone."""
    now = time.time() if now is None else now
    removed: list[str] = []
    for base, files in _channels(root).items():
        match = _BASE.fullmatch(base)
        if match is None or not _stale(match, max(mtime for _, mtime in files), now):
            continue
        for path, _ in files:
            try:
                os.unlink(path)
                removed.append(path)
            except OSError:
                pass
    return removed


def _channels(root: str) -> dict[str, list[tuple[str, float]]]:
    """Channel files in ``root`` by base name: (path, modification time) of each."""
    found: dict[str, list[tuple[str, float]]] = {}
    with os.scandir(root) as entries:
        for entry in entries:
            if not entry.name.startswith(PREFIX):
                continue
            match = _BASE.match(entry.name)
            if match is None:
                continue
            try:
                mtime = entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue  # removed meanwhile
            found.setdefault(match.group(0), []).append((entry.path, mtime))
    return found


def _stale(match: re.Match[str], newest: float, now: float) -> bool:
    """Whether the channel named by ``match``, last written at ``newest``, is stale."""
    owner, ns = match.group("owner"), match.group("ns")
    if owner is not None and owner.rsplit("-", 2)[0] != boot_id():
        began = _boot_time()
        if began is not None and newest < began - _CLOCK_STEP:
            return True  # an earlier boot's
    elif owner is not None and ns == pid_namespace():
        return not is_alive(owner)
    return now - newest > STALE_AFTER


@lru_cache(maxsize=1)
def _boot_time() -> float | None:
    """When this boot began (seconds since the epoch), None where ``/proc`` does not say."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            for line in f:
                if line.startswith("btime "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        pass
    return None
