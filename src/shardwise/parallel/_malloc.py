"""Keep freed memory in the process between tasks (glibc's malloc), instead of handing
it back to the kernel and faulting it in again for the next task.

Array-heavy tasks allocate and free many arrays of a few megabytes. glibc starts with
an mmap threshold of 128 KiB and raises it (and its trim threshold, to twice as much)
only as it sees such blocks freed, up to 32 MiB; until then, and whenever more than the
trim threshold lies free at the top of the heap after a task, the memory goes back to
the kernel and every page of the next task's arrays is faulted in and zeroed again. On
a virtual machine a fault costs microseconds: in a MinHash signature task of 4 MB of
text, ~4,400 faults per task took ~15 of ~70 ms. :func:`keep_freed_memory` sets the
two thresholds to glibc's own ceilings (32 MiB, and 64 MiB free before trimming) from
the start, so at most 64 MiB of freed memory stays with a process. Once per process;
nothing happens where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import sys
import threading
from typing import Any

__all__ = [
    "MMAP_THRESHOLD",
    "TRIM_THRESHOLD",
    "WARM_MOST",
    "keep_freed_memory",
    "map_range",
    "warm_heap",
]

MMAP_THRESHOLD = 32 << 20  # glibc's ceiling for its dynamic mmap threshold (64-bit)
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # what glibc pairs with it
_M_TRIM_THRESHOLD = -1  # mallopt parameters (malloc.h)
_M_MMAP_THRESHOLD = -3

_done: list[bool] = []
_lock = threading.Lock()


def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds to their dynamic ceilings (once per process).

    Returns:
        Whether the thresholds are set (False where the C library is not glibc).
    """
    with _lock:
        if not _done:
            _done.append(_set_thresholds())
        return _done[0]


def _glibc() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        return os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


def _set_thresholds() -> bool:
    if not _glibc():
        return False
    try:  # the interpreter's own symbols include the C library's
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    )


WARM_MOST = 48 << 20  # bytes warmed at most: glibc keeps up to TRIM_THRESHOLD free
WARM_STEP = 1 << 20  # bytes mapped in one call
_MADV_POPULATE_WRITE = 23  # Linux 5.14+: map (and zero) a range's pages in one call
_warmed: list[int] = [0]


def warm_heap(nbytes: int) -> threading.Thread | None:
    """Map about ``nbytes`` of glibc's heap for this thread's next allocations, once per
    process (only more than was warmed before), on a thread of its own; returns that
    thread (None: nothing to do, or not glibc).

    A fresh process's first batch of wide values (256 images of 100 KB are 25 MB of
    ``bytes``, made on the training thread) faulted in every page of them one by one,
    after the batch's reads: 20 ms of the images' first batch. Here the block is taken
    from the heap on the calling thread (``malloc``: nothing mapped yet), its pages are
    mapped on a thread that runs only where a core would be idle (so its CPU is not
    taken from the reads it overlaps), and it is freed: the batch's objects then take memory
    already mapped. Needs :func:`keep_freed_memory`, which keeps the freed block in the
    heap."""
    want = min(nbytes, WARM_MOST)
    if want <= _warmed[0] or not keep_freed_memory():
        return None
    libc = ctypes.CDLL(None, use_errno=True)
    libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    start = libc.malloc(want)
    if not start:
        return None
    _warmed[0] = want
    thread = threading.Thread(
        target=_map_idle, args=(libc, start, want), name="shardwise-warm", daemon=True
    )
    thread.start()
    return thread


def _map_idle(libc: Any, start: int, size: int) -> None:
    """Map the block's pages at the idle priority (in steps of :data:`WARM_STEP`: the
    kernel holds the process's memory map while it maps a step, and the reading threads'
    ``mmap`` calls wait for it; one 25 MB call held them back about 8 ms), then free it."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))  # this thread (Linux)
    except (AttributeError, OSError):
        pass
    try:
        if not map_range(start, size, WARM_STEP):
            ctypes.memset(start, 0, size)  # no such call here: mapped by writing
    finally:
        libc.free(start)


def _madvise() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).madvise
    except (OSError, AttributeError):
        return None


_MADVISE = _madvise()


def map_range(start: int, size: int, step: int | None = None) -> bool:
    """Map the whole pages of the ``size`` bytes at address ``start`` with
    ``madvise(MADV_POPULATE_WRITE)``, in calls of ``step`` bytes (None: one call), instead
    of one page fault at a time as they are first written: the kernel maps a range for
    about two thirds of the CPU. The call releases the GIL. Returns False where it is not
    available (not Linux, a kernel older than 5.14): the pages are then mapped as written."""
    if _MADVISE is None:
        return False
    page = mmap.PAGESIZE
    lo, hi = -(-start // page) * page, (start + size) // page * page
    for at in range(lo, hi, step or max(hi - lo, 1)):
        n = min(step or hi - lo, hi - at)
        if _MADVISE(ctypes.c_void_p(at), ctypes.c_size_t(n), _MADV_POPULATE_WRITE):
            return False
    return True
