"""An epoch's head start: the training process fills the node cache with its workers'
first units while they start; and a worker's downloads ahead of its reads
(:func:`downloads_ahead`, :func:`ahead_budget`). Units read as one entry (tar shards,
JSONL ranges, one-row-group files) are downloaded by ranges on the cache's download
threads, past the page cache; the others as their reader would."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.formats import Unit
from shardwise.index import DatasetIndex
from shardwise.loader.placement import in_dataloader_worker
from shardwise.loader.read.cached import UnitCache
from shardwise.plan import Plan
from shardwise.storage.cache import NodeCache
from shardwise.storage.forkgate import GATE

__all__ = ["HeadStart", "ahead_budget", "downloads_ahead", "head_start"]

THREADS = 4


class HeadStart:
    """Downloads, on threads of the training process, the first units each DataLoader
    worker of this rank will read this epoch, round-robin over the workers, until
    ``budget_bytes`` (stored bytes) are planned. New workers spend their first moments
    starting and opening connections; meanwhile the process that already has one fills
    the cache, and the workers then find their units there (or wait on the download in
    progress: each unit is still fetched once per node). Nothing here raises: a unit it
    cannot fetch is left to the worker that reads it, which reports the error.

    Args:
        index: the dataset (only remote files are fetched).
        cache: the node cache.
        columns: the columns the workers read (None: all); only their chunks are fetched.
    """

    def __init__(
        self, index: DatasetIndex, cache: NodeCache, columns: Sequence[str] | None = None
    ) -> None:
        self.index = index
        self.cache = cache
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._units = UnitCache(index, cache, columns)  # kept: what it learns of files' footers

    def start(
        self, plan: Callable[[], Plan], rank: int, num_workers: int, budget_bytes: int
    ) -> None:
        """Stop the previous epoch's head start; begin this one (``plan`` is called on a
        thread of its own, so planning a large dataset does not hold up the caller)."""
        self.stop()
        self._stop = threading.Event()
        queue = _Queue(lambda: self._heads(plan(), rank, num_workers, budget_bytes))
        self._threads = [
            threading.Thread(
                target=self._run,
                args=(self._units, queue, self._stop),
                daemon=True,
                name=f"shardwise-headstart-{i}",
            )
            for i in range(THREADS)
        ]
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        """Ask the threads to stop after the unit each one is fetching."""
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        """Wait for the threads to finish (for tests and benchmarks)."""
        for t in self._threads:
            t.join(timeout)

    def _heads(self, plan: Plan, rank: int, num_workers: int, budget_bytes: int) -> Iterator[int]:
        """Units in the order the workers will want them, until the budget is planned."""
        per_worker = [plan.worker(rank, w).units() for w in range(num_workers)]
        planned = 0
        for u in (u for row in itertools.zip_longest(*per_worker) for u in row if u is not None):
            planned += self.index.units[u].num_bytes
            if planned > budget_bytes:
                return
            yield u

    def _run(self, units: UnitCache, queue: _Queue, stop: threading.Event) -> None:
        while not stop.is_set():
            with GATE.working():  # planning too: it may import (a numpy submodule, ...)
                u = queue.next()
                if u is None:
                    return
                unit = self.index.units[u]
                if units.is_cached(unit):  # a warm epoch costs a stat per unit, nothing more
                    continue
            with contextlib.suppress(Exception):
                _download(units, unit)


def _download(units: UnitCache, unit: Unit) -> None:
    """Download ``unit``'s entries and wait until they are in: a unit read as one entry
    by ranges on the cache's download threads (past the page cache, as any download
    ahead), any other as its reader would."""
    whole = units.ranged(unit)
    if whole is None:
        with GATE.working(), units.serve(unit, complete=True):
            return  # its entries are downloaded (or found) and leased, then let go
    with contextlib.ExitStack() as stack:
        with GATE.working():  # the lease's start: its lock, its room, its fill begun
            data = stack.enter_context(units.cache.lease(*whole))
        wait = getattr(data, "wait_complete", None)
        if wait is not None:
            wait()  # a fork need not wait for this: the download threads hold it back


def head_start(
    previous: HeadStart | None,
    index: Any,
    cache: NodeCache | None,
    plan: Callable[[], Plan],
    rank: int,
    num_workers: int,
    prefetch_bytes: int,
    resuming: bool,
    columns: Sequence[str] | None = None,
) -> HeadStart | None:
    """Stop ``previous`` and start the head start of a new epoch, when it helps: in the
    training process, with a node cache, a dataset (not a mix) with remote files, and no
    resume point; ``prefetch_bytes`` per worker, at most half the cache's budget.
    Returns the :class:`HeadStart` to keep (``previous``, or a new one, or None)."""
    if previous is not None:
        previous.stop()
    if (
        cache is None
        or resuming
        or in_dataloader_worker()
        or not isinstance(index, DatasetIndex)
        or not any(UnitCache.cached(f.path) for f in index.files)
    ):
        return previous
    head = previous or HeadStart(index, cache, columns)
    head.start(plan, rank, num_workers, min(prefetch_bytes * num_workers, cache.budget_bytes // 2))
    return head


class _Queue:
    """Items of an iterator made lazily, handed to one thread at a time (None at the end)."""

    def __init__(self, make: Callable[[], Iterator[int]]) -> None:
        self._make = make
        self._items: Iterator[int] | None = None
        self._lock = threading.Lock()

    def next(self) -> int | None:
        with self._lock:
            try:
                if self._items is None:
                    self._items = self._make()
                return next(self._items, None)
            except (
                ShardwiseError,
                ValueError,
            ):  # a plan that cannot be made: the workers will say why
                self._items = iter(())
                return None


def downloads_ahead(
    index: Any, cache: NodeCache | None, columns: Sequence[str] | None
) -> Callable[[int], None] | None:
    """A function that starts downloading unit ``u`` of ``index`` into ``cache`` and
    returns at once (see :meth:`UnitCache.fetch_ahead`); None without a cache, for a mix
    of sources, or for a dataset with no remote file."""
    if (
        cache is None
        or not isinstance(index, DatasetIndex)
        or not any(UnitCache.cached(f.path) for f in index.files)
    ):
        return None
    units = UnitCache(index, cache, columns)
    return lambda u: units.fetch_ahead(index.units[u])


def ahead_budget(cache: NodeCache | None, prefetch_bytes: int) -> int:
    """Stored bytes a worker downloads ahead of its reads: its ``prefetch_bytes``, at
    most a quarter of the cache's budget."""
    return 0 if cache is None else min(prefetch_bytes, cache.budget_bytes // 4)
