"""A worker's first units, read on the in-process path's pool while the training thread
works out the order of its first window.

No row can be written to its place before the window's order is known, and working it
out takes the training thread a while (about 0.3-0.5 CPU s for a shuffled window of 2M
rows). On a fresh start the pool reads the worker's first units meanwhile, up to
``prefetch_bytes``. When all of the worker's units make one window, reading goes on, a
unit more as each read ends, until the order is known or half of the window's
estimated bytes are read: the window holds all of its rows by its end anyway (its
columns, or its unit tables), and each unit read early is let go once its rows are
written, so this raises no peak; without it the pool would sit idle once the budget
is read (11 of the 97 units of the benchmark's text data).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

from shardwise.loader.stream import Reading
from shardwise.plan.compose import WindowSource

__all__ = ["EarlyReads"]


class EarlyReads:
    """The first units of ``wp`` read on ``pool`` with ``load`` (see the module docstring).

    Args:
        reading: the dataset's reading settings (budget, unit sizes, interleave).
        wp: the worker's piece of the plan; a resumed worker reads nothing early (it
            may skip its first units).
        pool: where units are read.
        load: reads one unit.
    """

    def __init__(self, reading: Reading, wp: WindowSource, pool: Executor, load: Callable[[int], Any]) -> None:
        self.futures: dict[int, Future[Any]] = {}
        self._pool, self._load = pool, load
        self._lock = threading.Lock()
        self._more: list[int] = []  # read one at a time as reads end, until stop()
        if wp.skip:
            return
        units = wp.units()
        first = units[: 2 * reading.interleave + 2]
        sizes = [reading.size(u) for u in first]
        held = 0
        for i, (u, size) in enumerate(zip(first, sizes)):
            held += size
            if self.futures and held > reading.prefetch_bytes:
                if len(units) <= reading.interleave:  # one window: on while the order is worked out
                    half = sum(reading.size(v) for v in units) // 2
                    self._more = _within(first[i:], sizes[i:], half - (held - size))
                break
            self.futures[u] = pool.submit(load, u)
        for fut in list(self.futures.values()):
            fut.add_done_callback(self._read_another)

    def _read_another(self, _: Future[Any]) -> None:
        with self._lock:
            if not self._more:
                return
            u = self._more.pop(0)
            try:
                fut = self._pool.submit(self._load, u)
            except RuntimeError:  # the pool was shut down: the loop ended
                self._more.clear()
                return
            self.futures[u] = fut
        fut.add_done_callback(self._read_another)

    def stop(self) -> None:
        """Read no more units than those started (the order is known: the prefetcher
        reads the rest)."""
        with self._lock:
            self._more.clear()

    def take(self, u: int) -> Future[Any] | None:
        """The read of ``u`` started early, once; None if there is none."""
        with self._lock:
            return self.futures.pop(u, None)

    def first(self) -> tuple[int, Future[Any]] | None:
        """The first unit read early and its read, if any."""
        with self._lock:
            return next(iter(self.futures.items()), None)


def _within(units: list[int], sizes: list[int], room: int) -> list[int]:
    """The first of ``units`` whose ``sizes`` add up to at most ``room``."""
    out: list[int] = []
    for u, size in zip(units, sizes):
        room -= size
        if room < 0:
            break
        out.append(u)
    return out
