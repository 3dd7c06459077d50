"""A gate that keeps a process's background threads still while it forks.

A thread caught in the middle of its work when the process forks (a DataLoader starting
its workers) may hold locks (a module's import lock, a library's) that the child then
waits on forever. Threads do each piece of work inside :meth:`ForkGate.working`; a fork
waits for the pieces in progress (at most :data:`FORK_WAIT` seconds) and none starts until
it is done. The one gate of a process, :data:`GATE`, is wired to ``os.register_at_fork``;
the epoch's head start (:mod:`shardwise.loader.read.headstart`) and the node cache's
download threads (:mod:`shardwise.storage.cache.downloads`) use it.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

__all__ = ["FORK_WAIT", "GATE", "ForkGate"]

FORK_WAIT = 5.0  # seconds a fork waits for the work in progress


class ForkGate:
    """Counts the pieces of work in progress; a fork waits for them to end."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._active = 0
        self._forking = False

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """A piece of work: waits while the process forks, then holds the fork back."""
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
        """Stop new work and wait for the work in progress (bounded)."""
        with self._cond:
            self._forking = True
            self._cond.wait_for(lambda: self._active == 0, timeout=FORK_WAIT)

    def after_fork_in_parent(self) -> None:
        """Let the work go on."""
        with self._cond:
            self._forking = False
            self._cond.notify_all()

    def after_fork_in_child(self) -> None:
        """A fresh gate: no thread of the parent runs in the child."""
        self.__init__()  # type: ignore[misc]


GATE = ForkGate()
os.register_at_fork(
    before=GATE.before_fork,
    after_in_parent=GATE.after_fork_in_parent,
    after_in_child=GATE.after_fork_in_child,
)
