"""Memory for a window's columns: mapped page by page as it is first written, and kept
by the dataset for its next windows and epochs (:class:`WindowMemory`); and Arrow's
allocator in a process that streams (:func:`prefer_jemalloc`)."""

from __future__ import annotations

import mmap
import os
import sys
import threading
from typing import Any

import numpy as np

from shardwise.parallel._malloc import map_range

__all__ = ["WindowMemory", "map_pages", "prefer_jemalloc", "window_memory"]

SMALL = 1 << 20  # below this, ordinary heap memory
PAGE = mmap.PAGESIZE
HEADROOM = (
    8  # a new mapping has 1/8 more room than asked, so that a slightly larger column reuses it
)
LOOSEST = 5 / 4  # a free mapping within this of a request serves it as it is


def prefer_jemalloc() -> None:
    """Make jemalloc Arrow's default allocator in this process, where pyarrow has it, in
    place of pyarrow's own default (mimalloc): an allocator chosen by
    ``ARROW_DEFAULT_MEMORY_POOL`` or set in code (``pa.set_memory_pool``) is kept.

    Both paths call it when they start streaming: a DataLoader worker, and the training
    process when it iterates in-process. pyarrow's default, mimalloc, gave the memory of
    decoded units back to the system and faulted it in again, in transparent huge pages
    the kernel zeroes (and compacts memory for) one by one: in a fresh process's first
    epoch that was most of the system time. With jemalloc the first in-process epoch took
    0.8-0.9 of the time on four data shapes (``benchmarks/NOTES.md``, 2026-11-29). Buffers
    allocated before keep their own allocator, so nothing else changes for the process's
    Arrow data. The threads started after the switch get arenas of their own
    (:func:`_take_first_arena`)."""
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    import pyarrow as pa

    if pa.default_memory_pool().backend_name != "mimalloc":
        return  # jemalloc already, or another allocator the program chose
    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowNotImplementedError):
        return
    _take_first_arena(pa)


def _take_first_arena(pa: Any) -> None:
    """Give the threads started from now on (the loader's readers) jemalloc arenas of their
    own, which keep what they free for their next allocations for Arrow's decay time.

    jemalloc makes one arena when a process first allocates with it, and a thread that is
    the first to allocate gets it. That arena gave each freed buffer back to the system at
    once, so every unit was decoded into memory the kernel mapped and zeroed again, page by
    page: two thirds of decoding the held-out shape's 0.8 GB on one thread was kernel time.
    The arenas made later, with the same configured time, serve the next unit from what the
    last one freed (``benchmarks/NOTES.md``, 2026-11-30). So the thread that makes the
    switch takes the first arena itself, with one small allocation. A longer time for the
    later arenas (``pa.jemalloc_set_decay_ms``, 10 s) was tried and dropped: each reading
    thread's arena kept what its own thread freed, and the held-out shape's peak memory went
    over the loader's bound."""
    try:
        pa.allocate_buffer(64)  # this thread takes the arena jemalloc made first
    except pa.ArrowException:
        pass


def map_pages(dest: np.ndarray) -> None:
    """Map the pages of ``dest`` (a part of a window's memory about to be written) in
    one call (:func:`~shardwise.parallel._malloc.map_range`), instead of one page fault at
    a time as they are written: 1.2 GB took 0.42 CPU s against 0.65 s on the benchmark
    machine. Below ``SMALL`` bytes, or not contiguous, the pages are mapped as written."""
    if dest.nbytes >= SMALL and dest.flags.c_contiguous:
        map_range(dest.ctypes.data, dest.nbytes)


def window_memory(nbytes: int) -> np.ndarray:
    """``nbytes`` of new memory (uint8) for a window's column, in ordinary pages.

    numpy asks the kernel for huge pages for large arrays; where the kernel then
    compacts memory to find them as they are first touched (``defrag=madvise``), writing
    a window of 1.2 GB took about 1.5 CPU s more of kernel time than in ordinary pages
    on the 2-core benchmark machine. Units are written one after the other, so ordinary
    pages are mapped in order, cheaply."""
    if nbytes < SMALL:
        return np.empty(nbytes, dtype=np.uint8)
    return np.frombuffer(_anonymous(nbytes), dtype=np.uint8)


def _refs(items: list[Any], i: int) -> int:
    return sys.getrefcount(items[i])


# what _refs counts for an item only a list holds, measured the way _free measures (how
# many references the call itself adds differs between Python versions)
_LISTED = _refs([object()], 0)


def _holds(m: mmap.mmap, nbytes: int) -> bool:
    """Whether ``m`` serves a request of ``nbytes`` as it is (at most 1/4 to spare)."""
    return nbytes <= len(m) <= nbytes * LOOSEST


def _anonymous(nbytes: int) -> mmap.mmap:
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class WindowMemory:
    """The memory of one dataset's windows, handed out again once nothing uses it.

    A window of a large shuffle is gigabytes of new memory, and on a virtual machine the
    kernel zeroes and maps it for about 0.35 CPU s per GB (the text shape's 1.2 GB: 0.42
    s of a 3.4 s epoch). The next window, and every later epoch, need as much again, so
    the dataset keeps its mappings: a mapping no array refers to any more (every numpy
    view and Arrow buffer of a window holds a reference to it, so its reference count
    says when the last piece gathered from it has let go) serves the next request.

    Windows differ in size (their units do), and so do their columns, so a free mapping
    rarely has the size of the next request. A free one that holds it with at most 1/4
    to spare serves it as it is; else the free one nearest in size, resized to the
    request (and 1/8 more, so that a slightly larger column fits it next time). Resizing
    moves its pages (``mremap``): those it keeps stay mapped, and only a grown part is new
    to the kernel. While all mappings stay under the most bytes ever in use at once, a
    free one much larger than the request is kept for a larger column, and the request
    gets a new one. Free mappings beyond that bound go, oldest first; all go with the
    dataset. A forked process starts with none of its parent's. Below ``SMALL`` bytes,
    ordinary heap memory.

    Served only by a mapping within 4/5 of its size, and with the free ones kept only up
    to the bytes in use at the time (which let them all go at each epoch's start), the
    windows of the held-out benchmark's first epoch faulted in 119-203 thousand pages, and
    73-130 thousand this way (``benchmarks/NOTES.md``, 2026-11-30).
    """

    def __init__(self) -> None:
        self._maps: list[mmap.mmap] = []
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._high = 0  # the most bytes of mappings in use at once

    def take(self, nbytes: int) -> np.ndarray:
        """``nbytes`` of memory (uint8) for a window's column, from a free mapping or new."""
        if nbytes < SMALL:
            return np.empty(nbytes, dtype=np.uint8)
        with self._lock:
            if self._pid != os.getpid():
                self._maps, self._pid, self._high = [], os.getpid(), 0
            m = self._reuse(nbytes)
            if m is None:
                m = _anonymous(nbytes + nbytes // HEADROOM)
                self._maps.append(m)
            self._trim()
            return np.frombuffer(m, dtype=np.uint8, count=nbytes)

    def _reuse(self, nbytes: int) -> mmap.mmap | None:
        """A free mapping sized for ``nbytes`` (it moves to the end: used last), or None
        for a new one."""
        free = self._free()
        if not free:
            return None
        fits = [i for i in free if _holds(self._maps[i], nbytes)]
        i = min(fits or free, key=lambda i: abs(len(self._maps[i]) - nbytes))  # fewest changed
        m = self._maps[i]
        room = nbytes + nbytes // HEADROOM
        if len(m) > nbytes * LOOSEST and self.mapped + room <= self._high:
            return None  # keep the larger one for a larger column: a new one fits the bound
        if not _holds(m, nbytes):
            try:
                m.resize(room)  # the pages kept stay mapped; only a grown part is new
            except (OSError, ValueError, SystemError, BufferError):  # no mremap here
                return None
        self._maps.append(self._maps.pop(i))
        return m

    @property
    def mapped(self) -> int:
        """Bytes of all mappings held (in use or free)."""
        return sum(len(m) for m in self._maps)

    def _free(self) -> list[int]:
        return [i for i in range(len(self._maps)) if _refs(self._maps, i) <= _LISTED]

    def _trim(self) -> None:
        """Let the oldest free mappings go until all of them together hold no more than the
        most bytes this dataset's windows have used at once."""
        free = self._free()
        used = self.mapped - sum(len(self._maps[i]) for i in free)
        self._high = max(self._high, used)
        over = self.mapped - self._high
        gone: set[int] = set()
        for i in free:
            if over <= 0:
                break
            over -= len(self._maps[i])
            gone.add(i)
        self._maps = [m for i, m in enumerate(self._maps) if i not in gone]
