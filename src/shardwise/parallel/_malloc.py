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
import os
import sys
import threading

__all__ = ["MMAP_THRESHOLD", "TRIM_THRESHOLD", "keep_freed_memory"]

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
