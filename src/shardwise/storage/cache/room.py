"""Room under the node cache's budget: a download's part file is reserved only once its
bytes fit, evicting unleased entries (least recently used first) to make them fit.

Both steps run under the cache directory's exclusive lock (``<root>/.lock``), so processes
of the node never reserve the same free bytes twice.
"""

from __future__ import annotations

import contextlib
import os
import time

from shardwise.storage.cache.directory import scan_dir
from shardwise.storage.cache.lease import FileLock, owner_id
from shardwise.storage.cache.stats import CacheStats
from shardwise.storage.cache.verified import forget_verified

__all__ = ["directory_lock", "make_room", "reserve_part"]


def directory_lock(root: str) -> FileLock:
    """The lock of the whole cache directory (shared to read entries, exclusive to change
    what is on disk)."""
    return FileLock(os.path.join(root, ".lock"))


def reserve_part(
    root: str, key: str, need: int, budget_bytes: int, wait_seconds: float, stats: CacheStats
) -> str | None:
    """A part file counted as ``need`` bytes, once there is room; None if there is none
    within ``wait_seconds``."""
    if need > budget_bytes:
        return None
    deadline = time.monotonic() + wait_seconds
    while True:
        with directory_lock(root).held():
            if make_room(root, need, budget_bytes, stats):
                part = os.path.join(root, "tmp", f"{key}.{need}.{owner_id()}.part")
                os.close(os.open(part, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o666))
                return part
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)


def make_room(root: str, need: int, budget_bytes: int, stats: CacheStats) -> bool:
    """Evict unleased entries, least recently used first, until ``need`` more bytes fit
    (called under the exclusive lock)."""
    scan = scan_dir(root, clean=True)
    used = scan.used
    for _mtime, size, key in sorted(scan.entries):
        if used + need <= budget_bytes:
            break
        if key in scan.leased:
            continue
        path = os.path.join(root, "entries", key)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
            forget_verified(path)
            used -= size
            stats.evictions += 1
    return used + need <= budget_bytes
