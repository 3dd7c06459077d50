"""The node's record of checked entries, and what a written entry needs before its rename.

A checking pass reads a whole entry (its blocks' digests); once one process of the node has
made it, the others trust the entry while it is the same file: ``verified/<key>`` holds the
identity (boot, device, inode, size, mtime in ns) the entry had when it was checked or last
used. The mtime is set to an exact nanosecond then (not the kernel's coarse clock a write
stamps), so a file replaced, truncated or written to since has another identity and is
checked again. The boot is in it because entries are renamed into place without ``fsync`` (see
:func:`settle`): what a crash of the machine lost is checked for at the next boot's first
use.
"""

from __future__ import annotations

import contextlib
import os
import time

from shardwise.storage.cache.lease import NO_BOOT, boot_id

__all__ = ["forget_verified", "identity", "is_verified", "mark_verified", "settle"]


def settle(fd: int) -> None:
    """What a written entry needs before its rename into ``entries/``: nothing where the
    kernel names its boot, since the node's record of checked entries names the boot too
    (:func:`identity`), so after a crash of the machine every entry's digests are checked
    before it is trusted, and an entry whose bytes the crash lost is found bad and fetched
    again. Elsewhere an ``fsync``, so that a renamed entry is whole on disk. (An ``fsync``
    here took 0.6-1.2 s of a 64 MB shard's publish, and stalled the other downloads' writes
    for as long.)"""
    if boot_id() == NO_BOOT:
        os.fsync(fd)


def identity(st: os.stat_result) -> str:
    """What tells an entry file apart from any other or from itself changed, in this boot:
    the boot, device, inode, size and mtime (ns)."""
    return f"{boot_id()}:{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}"


def _marker(path: str) -> str:
    entries, key = os.path.split(path)
    return os.path.join(os.path.dirname(entries), "verified", key)


def is_verified(path: str, st: os.stat_result) -> bool:
    """True if the entry at ``path``, now ``st``, is the file whose checksum was checked."""
    try:
        fd = os.open(_marker(path), os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.read(fd, 128).decode("ascii", "replace") == identity(st)
    finally:
        os.close(fd)


def mark_verified(path: str, keep_time: bool = False) -> str | None:
    """Record that the entry at ``path`` is good as it is now (after a checksum pass, its
    download, or a use while its identity still matched). Its mtime becomes now (what
    least-recently-used eviction orders by), or with ``keep_time`` moves by 1 ns. Returns
    the identity recorded; a failure (None) only costs a checksum pass later."""
    try:
        st = os.stat(path)
        t = st.st_mtime_ns + 1 if keep_time else time.time_ns()
        os.utime(path, ns=(t, t))
        data = identity(os.stat(path))
        fd = os.open(_marker(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        try:
            os.write(fd, data.encode())
        finally:
            os.close(fd)
    except OSError:
        return None
    return data


def forget_verified(path: str) -> None:
    """Remove the record of the entry at ``path`` (it was deleted or found bad)."""
    with contextlib.suppress(OSError):
        os.unlink(_marker(path))
