"""Check and empty a node cache directory (``shardwise cache verify|clear DIR``)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field

from shardwise.errors import StorageError
from shardwise.storage.cache.directory import scan_dir
from shardwise.storage.cache.entry import BadEntry, read_entry
from shardwise.storage.cache.lease import FileLock
from shardwise.storage.cache.verified import forget_verified, mark_verified

__all__ = ["ClearReport", "VerifyReport", "cache_directory", "clear_cache", "verify_cache"]


@dataclass
class VerifyReport:
    """What :func:`verify_cache` found.

    Attributes:
        checked: entries read and checked.
        bad: ``(entry, reason)`` of every entry that failed.
        removed: bad entries deleted (a bad entry a live process leases is kept).
        stale: leases and partial downloads of dead processes deleted.
    """

    checked: int = 0
    bad: list[tuple[str, str]] = field(default_factory=list)
    removed: int = 0
    stale: int = 0


@dataclass
class ClearReport:
    """What :func:`clear_cache` removed and what it kept because a live process uses it."""

    removed: int = 0
    removed_bytes: int = 0
    kept_leased: int = 0


def cache_directory(path: str) -> str:
    """The node cache inside ``path``: ``path`` itself or its ``units`` directory (the
    ``cache_dir`` given to ``StreamingDataset``).

    Raises:
        StorageError: ``path`` holds no shardwise node cache.
    """
    for root in (os.path.join(path, "units"), path):
        if os.path.isdir(os.path.join(root, "entries")) and os.path.isdir(
            os.path.join(root, "leases")
        ):
            os.makedirs(os.path.join(root, "tmp"), exist_ok=True)  # made by the first download
            return root
    raise StorageError(
        f"not a shardwise cache directory (no entries/ and leases/ inside): {path}", path
    )


def _stale_count(root: str) -> int:
    before = sum(len(os.listdir(os.path.join(root, d))) for d in ("leases", "tmp"))
    scan_dir(root, clean=True)
    return before - sum(len(os.listdir(os.path.join(root, d))) for d in ("leases", "tmp"))


def verify_cache(path: str, *, remove: bool = True) -> VerifyReport:
    """Read every entry and check its record, length and checksum; delete the bad ones
    (unless ``remove=False``) and the leftovers of dead processes.

    Entries are read without holding the cache's lock, so training can go on meanwhile.
    """
    root = cache_directory(path)
    report = VerifyReport()
    lock = FileLock(os.path.join(root, ".lock"))
    with lock.held():
        report.stale = _stale_count(root)
    for name in sorted(os.listdir(os.path.join(root, "entries"))):
        entry = os.path.join(root, "entries", name)
        try:
            read_entry(entry)
            mark_verified(entry, keep_time=True)
        except FileNotFoundError:
            continue  # evicted meanwhile
        except (BadEntry, OSError) as exc:
            report.bad.append((entry, str(exc)))
            if remove:
                with lock.held():
                    if name not in scan_dir(root).leased:
                        with contextlib.suppress(FileNotFoundError):
                            os.unlink(entry)
                            forget_verified(entry)
                            report.removed += 1
        report.checked += 1
    return report


def clear_cache(path: str, *, all: bool = False) -> ClearReport:
    """Delete every entry no live process leases (with ``all=True`` the leased ones too:
    a reader that already holds an entry's bytes is unaffected; others download again),
    and the leftovers of dead processes."""
    root = cache_directory(path)
    report = ClearReport()
    with FileLock(os.path.join(root, ".lock")).held():
        scan = scan_dir(root, clean=True)
        for _, size, key in scan.entries:
            if key in scan.leased and not all:
                report.kept_leased += 1
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(root, "entries", key))
                forget_verified(os.path.join(root, "entries", key))
                report.removed += 1
                report.removed_bytes += size
        for name in os.listdir(os.path.join(root, "locks")):
            lock = FileLock(os.path.join(root, "locks", name), remove=True)
            if lock.acquire(timeout=0):  # nobody downloading it: the file can go
                lock.release()
    return report
