"""One background thread of a process, for work a caller asks for and must not wait on
(e.g. reading a Parquet file's footer before its row groups can be downloaded ahead)."""

from __future__ import annotations

import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Behind"]


class Behind:
    """Runs the calls given to :meth:`put` one after another on a daemon thread, made at
    the first call in each process (a forked child makes its own). A call's exception is
    dropped: the work is an optimisation, and whoever needs its result does it again and
    gets the error."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._pid = -1
        self._jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]] | None = None

    def put(self, call: Callable[..., Any], *args: Any) -> None:
        """Run ``call(*args)`` on the thread; returns at once."""
        if self._pid != os.getpid() or self._jobs is None:
            self._pid, self._jobs = os.getpid(), queue.SimpleQueue()
            jobs = self._jobs
            threading.Thread(target=self._run, args=(jobs,), daemon=True, name=self._name).start()
        self._jobs.put((call, args))

    @staticmethod
    def _run(jobs: queue.SimpleQueue[tuple[Callable[..., Any], tuple[Any, ...]]]) -> None:
        while True:
            call, args = jobs.get()
            with contextlib.suppress(Exception):
                call(*args)
