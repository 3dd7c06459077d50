"""Background prefetch of units with a bounded memory budget.

A :class:`Prefetcher` reads the units a worker will need next on a small thread
pool (Arrow decoding releases the GIL), in schedule order, while the bytes held
by finished-but-unconsumed and in-flight reads stay under ``budget_bytes``. At
least one read is always allowed, so a unit larger than the budget still loads.
Given ``ahead``, it also names the units after those (up to ``ahead_bytes`` of them,
counted by ``ahead_size``) to a downloader that fetches them into the node cache
meanwhile: disk, not memory, holds those.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Generator, Iterable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

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
        ahead: told each key once, before its load, while the keys told but not yet
            loaded take at most ``ahead_bytes`` (at least one key, at most
            ``max_ahead``); it must return at once (e.g. start a download).
        ahead_size: the bytes a key counts for ``ahead_bytes`` (``size_of_key`` if None).
        ahead_bytes: see ``ahead``.
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
        ahead: Callable[[K], None] | None = None,
        ahead_size: Callable[[K], int] | None = None,
        ahead_bytes: int = 0,
    ) -> None:
        if budget_bytes < 0 or threads < 1 or max_ahead < 1:
            raise ConfigError("budget_bytes must be >= 0, threads and max_ahead >= 1")
        self.load = load
        self.size_of_key = size_of_key
        self.budget_bytes = budget_bytes
        self.threads = threads
        self.max_ahead = max_ahead
        self.executor = executor
        self.ahead = ahead
        self.ahead_size = ahead_size or size_of_key
        self.ahead_bytes = ahead_bytes
        self.peak_bytes = 0
        # keys read ahead: at most the first `hold_after` while it is set (the others when
        # the consumer needs them), all once it is None again
        self.hold_after: int | None = None
        # the first keys, all loaded at once whatever ``max_ahead`` (a window whose every
        # item is needed before its first batch: a slow one must not hold up the others)
        self.first_keys = 0

    def _pool(self) -> AbstractContextManager[Executor]:
        if self.executor is not None:
            return nullcontext(self.executor)
        return ThreadPoolExecutor(self.threads, thread_name_prefix="shardwise-prefetch")

    def iterate(self, keys: Iterable[K]) -> Generator[V, None, None]:
        """Yield the loaded items in the order of ``keys``."""
        pending: deque[tuple[int, Future[V]]] = deque()
        held = 0
        upcoming = _Upcoming(keys, self)
        submitted = 0
        with self._pool() as pool:
            try:
                while True:
                    while len(pending) < self.max_ahead or submitted < self.first_keys:
                        if pending and self.hold_after is not None and submitted >= self.hold_after:
                            break  # held back: read when the consumer needs it
                        key = upcoming.first()
                        if key is _END:
                            break
                        size = self.size_of_key(key)  # type: ignore[arg-type]
                        if pending and held + size > self.budget_bytes:
                            break  # over budget: wait until the consumer frees room
                        upcoming.pop()
                        pending.append((size, pool.submit(self.load, key)))  # type: ignore[arg-type]
                        held, submitted = held + size, submitted + 1
                        self.peak_bytes = max(self.peak_bytes, held)
                    if self.hold_after is None:  # nothing downloaded ahead while reads are held
                        upcoming.tell()
                    if not pending:
                        return
                    size, fut = pending.popleft()
                    value = fut.result()
                    held -= size
                    yield value
            finally:
                for _, fut in pending:
                    fut.cancel()


_END = object()


class _Upcoming(Generic[K]):
    """The keys not yet loaded, read from the caller's iterable as far as ``ahead``
    needs to look, and which of them ``ahead`` was told."""

    def __init__(self, keys: Iterable[K], prefetcher: Prefetcher[K, Any]) -> None:
        self._it = iter(keys)
        self._keys: deque[K] = deque()
        self._told = 0
        self._p = prefetcher

    def _pull(self) -> bool:
        try:
            self._keys.append(next(self._it))
        except StopIteration:
            return False
        return True

    def first(self) -> K | object:
        """The next key to load (``_END`` after the last)."""
        if not self._keys and not self._pull():
            return _END
        return self._keys[0]

    def pop(self) -> None:
        """The first key is being loaded."""
        self._keys.popleft()
        self._told = max(0, self._told - 1)

    def tell(self) -> None:
        """Tell ``ahead`` the keys that now fit its budget."""
        p = self._p
        if p.ahead is None:
            return
        total = sum(p.ahead_size(self._keys[i]) for i in range(self._told))
        while self._told < p.max_ahead:
            if self._told == len(self._keys) and not self._pull():
                return
            size = p.ahead_size(self._keys[self._told])
            if self._told and total + size > p.ahead_bytes:
                return
            p.ahead(self._keys[self._told])
            total += size
            self._told += 1
