"""Which local files Arrow readers memory-map: those on a disk filesystem.

Reading a Parquet row group from a memory-mapped file skips copying its bytes into read
buffers of their own (25-30% less CPU to decode uncompressed columns on the benchmark
machine). But a read fault in a mapped file that cannot be served (a network
filesystem's server gone, a FUSE daemon's error, a file truncated under the reader)
kills the process with SIGBUS, where an ordinary read returns an error that shardwise
names, and retries when it is transient. So only files on filesystems backed by a local
disk or memory are mapped; files on NFS, SMB, FUSE mounts (s3fs, gcsfuse, ...), cluster
filesystems or unknown ones are read. On a local disk what is left is a file truncated
in place while it is read. A unit read in two parts checks its file's size again before
its rest (a file cut shorter since its head is read anew, whole, and a cut one is a
``FormatError``); shardwise's own writers replace a file by renaming a new one over it,
which leaves a mapped file whole. (Local files are read as they are when read: unlike a
remote file's ETag, a local file's modification time is not compared with the index's.)
"""

from __future__ import annotations

import functools
import os
import re

__all__ = ["mappable", "parse_mountinfo"]

# filesystems whose page faults are served from a local disk or from memory
LOCAL_FILESYSTEMS = frozenset(
    {
        "ext2",
        "ext3",
        "ext4",
        "xfs",
        "btrfs",
        "zfs",
        "f2fs",
        "jfs",
        "reiserfs",
        "tmpfs",
        "ramfs",
        "overlay",
        "squashfs",
        "vfat",
        "exfat",
    }
)


def parse_mountinfo(text: str) -> list[tuple[str, str]]:
    """``(mount point, filesystem type)`` of each line of ``/proc/self/mountinfo``, the
    longest mount points first."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if sep and len(fields) >= 5 and right.split():
            point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])
            mounts.append((point, right.split()[0]))
    return sorted(mounts, key=lambda m: len(m[0]), reverse=True)


@functools.lru_cache(maxsize=1)
def _mounts() -> tuple[tuple[str, str], ...]:
    try:
        with open("/proc/self/mountinfo") as f:
            return tuple(parse_mountinfo(f.read()))
    except OSError:  # not Linux: nothing is mapped
        return ()


def mappable(path: str, mounts: tuple[tuple[str, str], ...] | None = None) -> bool:
    """Whether the local file ``path`` is on a disk or memory filesystem (see the module
    docstring); ``mounts`` as :func:`parse_mountinfo` gives them (default: this process's)."""
    real = os.path.realpath(path)
    for point, fstype in _mounts() if mounts is None else mounts:
        if real == point or real.startswith(point.rstrip("/") + "/"):
            return fstype in LOCAL_FILESYSTEMS
    return False
