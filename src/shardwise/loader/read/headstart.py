"""An epoch's head start: the training process fills the node cache with its workers'
first units while they start."""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardwise.errors import ShardwiseError
from shardwise.index import DatasetIndex
from shardwise.loader.placement import in_dataloader_worker
from shardwise.loader.read.cached import UnitCache
from shardwise.plan import Plan
from shardwise.storage.cache import NodeCache

__all__ = ["HeadStart", "head_start"]

THREADS = 4
FORK_WAIT = 5.0  # seconds a fork waits for the downloads in progress


class _ForkGate:
    """Keeps the head start's threads still while this process forks (a DataLoader
    starting its workers): a thread caught planning or downloading may hold locks (a
    module's import lock, a library's) that the child would then wait on forever. A fork
    waits for the work in progress (at most ``FORK_WAIT`` seconds); none starts until it
    is done."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._forking = False

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._forking)
            self._active += 1
        try:
            yield
        finally:
            with self._cond:
                self._active -= 1
                self._cond.notify_all()

    def before_fork(self) -> None:
        with self._cond:
            self._forking = True
            self._cond.wait_for(lambda: self._active == 0, timeout=FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        self.__init__()  # type: ignore[misc]  # no thread of the parent runs here


_GATE = _ForkGate()
os.register_at_fork(
    before=_GATE.before_fork,
    after_in_parent=_GATE.after_fork_in_parent,
    after_in_child=_GATE.after_fork_in_child,
)


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
            with _GATE.working():  # planning too: it may import (a numpy submodule, ...)
                u = queue.next()
                if u is None:
                    return
                unit = self.index.units[u]
                if units.is_cached(unit):  # a warm epoch costs a stat per unit, nothing more
                    continue
                with contextlib.suppress(Exception), units.serve(unit, complete=True):
                    pass  # its entries are downloaded (or found) and leased, then let go


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
