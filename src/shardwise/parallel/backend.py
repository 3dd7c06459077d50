"""The backend interface: a session that accepts chunks and reports finished ones.

A backend is one small class. :meth:`Backend.open` returns a :class:`Session` for one
map call; the driver in :mod:`shardwise.parallel._driver` submits chunks of
``(index, item)`` pairs, waits for finished ones, and handles ordering, retries, progress
and cancellation the same way for every engine.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeAlias

from shardwise.parallel._in_worker import Outcome

__all__ = ["Backend", "BackendSpec", "Session", "WorkerLost"]


class WorkerLost:
    """Marker result: the worker running a chunk died (killed, OOM, node lost), or, with
    ``missing`` set, could not import that module to load the task (not retried)."""

    def __init__(self, reason: str, missing: str = "", hint: str = "") -> None:
        self.reason = reason
        self.missing = missing
        self.hint = hint

    @classmethod
    def of(cls, exc: BaseException, hint: str) -> WorkerLost:
        """What a backend reports for a chunk whose job raised ``exc`` (errors of the task's
        function come back as outcomes, so this is the engine's: a lost worker, or the
        task's function or arguments that could not be loaded; ``hint`` says how to ship
        the missing code to this engine's workers)."""
        reason = f"{type(exc).__name__}: {str(exc)[:500]}"
        return cls(reason, _missing_module(exc), hint)

    def __repr__(self) -> str:
        return f"WorkerLost({self.reason!r})"


_NO_MODULE = re.compile(r"No module named '([^']+)'")


def _missing_module(exc: BaseException) -> str:
    """The module named by a ``ModuleNotFoundError`` in ``exc``, its causes, or its text
    (engines wrap a worker's error in their own, or only keep its message)."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, ModuleNotFoundError) and cur.name:
            return cur.name
        found = _NO_MODULE.search(str(cur))
        if found:
            return found.group(1)
        nxt = getattr(cur, "cause", None)
        cur = cur.__cause__ or cur.__context__ or (nxt if isinstance(nxt, BaseException) else None)
    return ""


Finished = tuple[int, "list[Outcome] | WorkerLost"]


class Session(ABC):
    """One map call's connection to a backend."""

    @abstractmethod
    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        """Start a chunk."""

    @abstractmethod
    def wait(self, timeout: float) -> list[Finished]:
        """Return the chunks that finished (may be empty after ``timeout`` seconds)."""

    def counters(self) -> int:
        """Units reported by running tasks through :func:`report` since the last call."""
        return 0

    @abstractmethod
    def close(self, cancel: bool) -> None:
        """End the session; with ``cancel`` stop work still running."""


class Backend(ABC):
    """A place to run tasks. Subclasses set ``name`` and implement two methods.

    Args:
        n_jobs: parallelism; ``None`` or ``-1`` means every core or cluster slot.
        **options: backend-specific options.
    """

    name: ClassVar[str] = ""
    #: tasks run in the caller's process: nothing is pickled (thread, sequential)
    in_process: ClassVar[bool] = False

    def __init__(self, n_jobs: int | None = None, **options: Any) -> None:
        self.n_jobs = None if n_jobs in (None, -1) else int(n_jobs)
        if self.n_jobs is not None and self.n_jobs < 1:
            from shardwise.errors import ConfigError

            raise ConfigError(f"n_jobs must be -1 or at least 1, got {n_jobs}")
        self.options = options

    @abstractmethod
    def slots(self) -> int:
        """How many tasks can run at once."""

    @abstractmethod
    def open(
        self,
        fn: Callable[[Any], Any],
        retry_on: tuple[type[BaseException], ...],
        parallelism: int,
    ) -> Session:
        """Open a session running ``fn`` with at most ``parallelism`` chunks at a time."""

    def default_chunksize(self, n_items: int | None, parallelism: int) -> int:
        """Items per chunk when the caller does not say."""
        if n_items is None:
            return 1
        return max(1, min(256, n_items // (parallelism * 8)))

    def close(self) -> None:  # noqa: B027 - optional hook, no-op by default
        """Release what this backend started (pools, clusters, sessions)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_jobs={self.n_jobs})"


# what ``backend=`` accepts everywhere: a registered name, an instance, or None for the
# active backend (the local process pool outside a ``parallel_backend`` block)
BackendSpec: TypeAlias = "str | Backend | None"
