#!/usr/bin/env python
"""What writing a head's 2.6 MB of image bytes costs in memory new to the process, against
memory freed and taken again, on this machine: the copy into new memory faulted in page by
page, the same with its pages mapped first in one ``madvise(MADV_POPULATE_WRITE)`` call,
with transparent huge pages asked for (``MADV_HUGEPAGE``), and the copy into memory
reused. Arrow allocates with jemalloc, as the loader's readers do.

Run from the repository root, in a fresh process::

    PYTHONPATH=src .venv/bin/python benchmarks/fresh_memory_probe.py

Each line gives the median of 12 copies, in ms (mapping + copy), and the minor page faults
of one copy.
"""

from __future__ import annotations

import ctypes
import resource
import statistics
import time
from collections.abc import Callable

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.memory import prefer_jemalloc
from shardwise.parallel._malloc import map_range

SIZE = 2_600_000  # a head of 25 images of about 100 KB
HUGE = 2 << 20
_MADV_HUGEPAGE = 14


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def _arrow(n: int) -> tuple[object, np.ndarray]:
    buf = pa.allocate_buffer(n)
    return buf, np.frombuffer(buf, dtype=np.uint8)


def _huge(n: int) -> tuple[object, np.ndarray]:
    raw = np.empty(n + HUGE, dtype=np.uint8)
    at = (-raw.ctypes.data) % HUGE
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise(ctypes.c_void_p(raw.ctypes.data + at), ctypes.c_size_t(n), _MADV_HUGEPAGE)
    return raw, raw[at : at + n]


def _copies(
    src: np.ndarray, make: Callable[[int], tuple[object, np.ndarray]], populate: bool
) -> tuple[list[object], str]:
    kept, times, faults = [], [], []
    for _ in range(12):
        owner, dest = make(len(src))
        kept.append(owner)
        t, f = time.perf_counter(), _faults()
        if populate:
            map_range(dest.ctypes.data, dest.nbytes)
        mapped = time.perf_counter()
        dest[:] = src
        times.append((mapped - t, time.perf_counter() - mapped))
        faults.append(_faults() - f)
    setup = statistics.median(a for a, _ in times) * 1e3
    copy = statistics.median(b for _, b in times) * 1e3
    return kept, f"{setup:5.2f} + {copy:5.2f} ms, {statistics.median(faults):5.0f} faults"


def main() -> None:
    prefer_jemalloc()
    src = np.frombuffer(np.random.default_rng(0).bytes(SIZE), dtype=np.uint8)
    kept, line = _copies(src, _arrow, False)
    print(f"new memory, faulted page by page     {line}")
    del kept
    kept, line = _copies(src, _arrow, False)
    print(f"the same memory, freed and reused    {line}")
    more, line = _copies(src, _arrow, True)
    print(f"new memory, mapped first (populate)  {line}")
    huge, line = _copies(src, _huge, False)
    print(f"new memory, transparent huge pages   {line}")
    del kept, more, huge


if __name__ == "__main__":
    main()
