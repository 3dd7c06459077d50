"""Writing a download's ranges into its part file past the page cache.

On a virtual machine that hands its free memory back to the host, every fresh page-cache
page costs a fault on the host: buffered writes of a cold download then cost more CPU
than the download. The aligned head of each range is written with ``O_DIRECT`` from a
page-aligned buffer each download thread reuses; the short tail, and everything on a file
system that refuses direct I/O (tmpfs, some network file systems), through the page
cache. Readers read through the page cache as before, so each page enters it once.
"""

from __future__ import annotations

import errno
import mmap
import os
import threading

__all__ = ["open_direct", "range_buffer", "write_range"]

_LOCAL = threading.local()  # each download thread's buffer, reused range after range


def range_buffer(n: int, least: int) -> memoryview:
    """This thread's buffer of ``n`` bytes (at least ``least`` are kept, reused range after
    range): page-aligned (mapped), so it can be written with O_DIRECT."""
    buf: memoryview | None = getattr(_LOCAL, "buf", None)
    if buf is None or len(buf) < n:
        buf = _LOCAL.buf = memoryview(mmap.mmap(-1, max(n, least)))
    return buf[:n]


_DIRECT = getattr(os, "O_DIRECT", 0)
_ALIGN = 4096


def open_direct(part: str) -> int:
    """The part file opened for writes that bypass the page cache, or -1 where the file
    system refuses them."""
    if not _DIRECT:
        return -1
    try:
        return os.open(part, os.O_WRONLY | _DIRECT)
    except OSError:
        return -1


def write_range(fd: int, direct: int, view: memoryview, at: int) -> int:
    """Write ``view`` at ``at``: its aligned head through ``direct`` (if open), the rest
    through ``fd``. Returns ``direct``, or -1 once the file system refused a direct write."""
    head = len(view) - len(view) % _ALIGN if direct >= 0 and at % _ALIGN == 0 else 0
    if head:
        try:
            _pwrite_all(direct, view[:head], at)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            head, direct = 0, -1
    _pwrite_all(fd, view[head:], at + head)
    return direct


def _pwrite_all(fd: int, view: memoryview, at: int) -> None:
    while view:
        n = os.pwrite(fd, view, at)
        view, at = view[n:], at + n
