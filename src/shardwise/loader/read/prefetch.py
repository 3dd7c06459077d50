"""Background prefetch of units with a bounded memory budget.

A :class:`Prefetcher` reads the units a worker will need next on a small thread
pool (Arrow decoding releases the GIL), in schedule order, while the bytes held
by finished-but-unconsumed and in-flight reads stay under ``budget_bytes``. At
least one read is always allowed, so a unit larger than the budget still loads.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Generic, TypeVar

from shardwise.errors import ConfigError

K = TypeVar("K")
V = TypeVar("V")

__all__ = ["Prefetcher"]


class Prefetcher(Generic[K, V]):
    """Yield ``load(key)`` for each key in order, loading ahead in the background.

    Args:
        load: the function reading one item (e.g. one unit).
        size_of_key: the estimated bytes of an item before it is read.
        budget_bytes: cap on estimated bytes held ahead of the consumer.
        threads: reader threads (of a pool of its own, made for each :meth:`iterate`).
        max_ahead: cap on the number of items loaded ahead.
        executor: run the loads on this pool instead (shared with other work; it is
            not shut down here).
    """

    def __init__(
        self,
        load: Callable[[K], V],
        size_of_key: Callable[[K], int],
        *,
        budget_bytes: int = 256 * 2**20,
        threads: int = 2,
        max_ahead: int = 8,
        executor: Executor | None = None,
    ) -> None:
        if budget_bytes < 0 or threads < 1 or max_ahead < 1:
            raise ConfigError("budget_bytes must be >= 0, threads and max_ahead >= 1")
        self.load = load
        self.size_of_key = size_of_key
        self.budget_bytes = budget_bytes
        self.threads = threads
        self.max_ahead = max_ahead
        self.executor = executor
        self.peak_bytes = 0
        # keys read ahead: at most the first `hold_after` while it is set (the others when
        # the consumer needs them), all once it is None again
        self.hold_after: int | None = None

    def _pool(self) -> AbstractContextManager[Executor]:
        if self.executor is not None:
            return nullcontext(self.executor)
        return ThreadPoolExecutor(self.threads, thread_name_prefix="shardwise-prefetch")

    def iterate(self, keys: Iterable[K]) -> Generator[V, None, None]:
        """Yield the loaded items in the order of ``keys``."""
        pending: deque[tuple[int, Future[V]]] = deque()
        held = 0
        it = iter(keys)
        waiting: list[K] = []  # a key read from `it` but not yet submitted (over budget)
        exhausted = False
        submitted = 0
        with self._pool() as pool:
            try:
                while True:
                    while not exhausted and len(pending) < self.max_ahead:
                        if pending and self.hold_after is not None and submitted >= self.hold_after:
                            break  # held back: read when the consumer needs it
                        if not waiting:
                            try:
                                waiting.append(next(it))
                            except StopIteration:
                                exhausted = True
                                break
                        key = waiting[0]
                        size = self.size_of_key(key)
                        if pending and held + size > self.budget_bytes:
                            break  # over budget: wait until the consumer frees room
                        waiting.pop()
                        pending.append((size, pool.submit(self.load, key)))
                        held, submitted = held + size, submitted + 1
                        self.peak_bytes = max(self.peak_bytes, held)
                    if not pending:
                        return
                    size, fut = pending.popleft()
                    value = fut.result()
                    held -= size
                    yield value
            finally:
                for _, fut in pending:
                    fut.cancel()
