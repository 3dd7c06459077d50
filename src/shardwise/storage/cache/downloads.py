"""The download threads of one process's node cache: they fetch the ranges of the fills
in progress (those a reader waits on first, then those asked for ahead, in the order
asked) and start the fills asked for ahead of time."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from shardwise.storage.cache.fill import Fill
from shardwise.storage.forkgate import GATE

__all__ = ["THREADS", "Downloads"]

THREADS = 2


class Downloads:
    """A few daemon threads (made on first use) working for the fills of one process.

    Args:
        start: gets a fill asked for ahead its lock and room (see
            :meth:`~shardwise.storage.cache.node.NodeCache.fetch_ahead`).
        publish: called with a fill whose last range is in.
        fail: called with a fill and the error that stopped one of its ranges.
        threads: how many ranges are fetched at once.
    """

    def __init__(
        self,
        start: Callable[[Fill], None],
        publish: Callable[[Fill], None],
        fail: Callable[[Fill, BaseException], None],
        threads: int = THREADS,
    ) -> None:
        self._start, self._publish, self._fail = start, publish, fail
        self._size = threads
        self._cond = threading.Condition()
        self._fills: list[Fill] = []
        self._starts: deque[Fill] = deque()
        self._threads: list[threading.Thread] = []

    def add(self, fill: Fill) -> None:
        """Fetch ``fill``'s ranges (it has begun)."""
        with self._cond:
            self._fills.append(fill)
            self._wake()

    def start_later(self, fill: Fill) -> None:
        """Start ``fill`` on a download thread, then fetch its ranges."""
        with self._cond:
            self._starts.append(fill)
            self._wake()

    def _wake(self) -> None:
        self._cond.notify_all()
        if len(self._threads) < self._size:
            t = threading.Thread(
                target=self._run, daemon=True, name=f"shardwise-download-{len(self._threads)}"
            )
            self._threads.append(t)
            t.start()

    def _next(self) -> tuple[Fill, tuple[int, int, int] | None]:
        """The next job: a range of the most wanted fill, else a fill to start (waits)."""
        with self._cond:
            while True:
                self._fills = [f for f in self._fills if f.has_work()]
                ranked = sorted(self._fills, key=lambda f: (not f.wanted, f.order))
                if ranked and (ranked[0].wanted or not self._starts):
                    job = ranked[0].next_range()
                    if job is not None:
                        return ranked[0], job
                    continue
                if self._starts:
                    return self._starts.popleft(), None
                self._cond.wait()

    def _run(self) -> None:
        while True:
            fill, job = self._next()
            with GATE.working():  # a fork waits for the range in progress (see forkgate)
                self._work(fill, job)

    def _work(self, fill: Fill, job: tuple[int, int, int] | None) -> None:
        if job is None:
            self._start(fill)
            return
        try:
            last = fill.fetch(*job)
        except Exception as exc:  # noqa: BLE001 - settled in the fill: its readers get it
            self._fail(fill, exc)
            return
        if last:
            self._publish(fill)
