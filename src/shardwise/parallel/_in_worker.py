"""What runs inside a worker: a chunk of items through ``fn``, errors caught and described.

Every backend ships the same :func:`run_chunk` to its workers, so an exception raised by
the user's function reaches the driver as data (type, message, remote traceback) and the
only thing a backend itself can report as a failure is a lost worker. That keeps the
failure semantics identical on every engine.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import pickle
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["Outcome", "by_value", "main_not_reimported", "report", "run_chunk", "set_reporter"]

# Set inside worker processes that can stream progress to the driver (local backend).
_reporter: Callable[[int], None] | None = None


@dataclass(frozen=True)
class Outcome:
    """The result of one item.

    Attributes:
        index: position of the item in the input.
        ok: True if ``fn`` returned.
        value: the return value, or the formatted remote traceback when not ok.
        error: ``"Type: message"`` when not ok.
        transient: the exception is one the caller declared retryable.
        exception: the pickled exception, when it survives a pickle round trip.
    """

    index: int
    ok: bool
    value: Any
    error: str = ""
    transient: bool = False
    exception: bytes | None = None

    def raise_error(self) -> None:
        """Re-raise the task's exception in the caller, or a TaskError if it was not sent."""
        from shardwise.errors import TaskError

        exc: BaseException | None = None
        if self.exception is not None:
            try:
                exc = pickle.loads(self.exception)
            except Exception:  # noqa: BLE001 - fall back to TaskError
                exc = None
        if exc is None:
            raise TaskError(self.error, self.index, self.value)
        exc.task_index = self.index  # type: ignore[attr-defined]
        exc.remote_traceback = self.value  # type: ignore[attr-defined]
        exc.add_note(f"raised by parallel task {self.index}; remote traceback:\n{self.value}")
        raise exc


def by_value(obj: Any) -> bytes:
    """Pickle ``obj`` with cloudpickle: functions and classes defined in ``__main__`` (a
    script, a notebook, ``python -c``, stdin) travel by value, others by reference."""
    import cloudpickle

    data: bytes = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return data


@contextlib.contextmanager
def main_not_reimported() -> Iterator[None]:
    """While engines start worker processes with ``multiprocessing``, have them skip
    re-running the caller's main script (as they do for an interactive session), so a
    script without an ``if __name__ == "__main__":`` guard is not run again in each.
    Functions from ``__main__`` reach those workers by value (cloudpickle)."""
    main = sys.modules.get("__main__")
    if main is None or getattr(main, "__spec__", None) is not None:
        yield
        return
    main.__spec__ = importlib.machinery.ModuleSpec("__main__", None)
    try:
        yield
    finally:
        main.__spec__ = None


def _try_pickle(exc: BaseException) -> bytes | None:
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)
    except Exception:  # noqa: BLE001 - not every exception survives pickling
        return None
    return blob


def _pickled(exc: BaseException) -> bytes | None:
    """The exception pickled; if that fails, without its chain (a pickling hook such as
    tblib's sends ``__cause__`` along, and a library's cause may not pickle, e.g. an HTTP
    error holding its response headers; the remote traceback still shows the chain)."""
    blob = _try_pickle(exc)
    if blob is None:
        chain = exc.__cause__, exc.__context__, exc.__traceback__
        exc.__cause__ = exc.__context__ = exc.__traceback__ = None
        try:
            blob = _try_pickle(exc)
        finally:
            exc.__cause__, exc.__context__, exc.__traceback__ = chain
    return blob


def set_reporter(fn: Callable[[int], None] | None) -> None:
    """Install the per-task counter sink of this worker process (backend use)."""
    global _reporter
    _reporter = fn


def report(n: int = 1) -> None:
    """Add ``n`` to the running counter of the current task (rows, bytes, ...).

    Shown as a second progress figure while the task runs on the local, thread, sequential,
    ray, spark and dask backends; a no-op where nothing listens (joblib), so functions can
    call it unconditionally.
    """
    if _reporter is not None:
        _reporter(n)


def run_chunk(
    fn: Callable[[Any], Any],
    chunk: Sequence[tuple[int, Any]],
    retry_on: tuple[type[BaseException], ...] = (),
) -> list[Outcome]:
    """Apply ``fn`` to each ``(index, item)``; never raises for errors of ``fn``."""
    out: list[Outcome] = []
    for index, item in chunk:
        try:
            out.append(Outcome(index, True, fn(item)))
        except Exception as exc:  # noqa: BLE001 - described and re-raised by the driver
            out.append(
                Outcome(
                    index,
                    False,
                    traceback.format_exc(),
                    f"{type(exc).__name__}: {exc}",
                    isinstance(exc, retry_on) if retry_on else False,
                    _pickled(exc),
                )
            )
    return out


class Throttled:
    """Batch counter reports so a tight loop does not flood the driver."""

    def __init__(self, send: Callable[[int], None], interval: float = 0.2) -> None:
        self._send = send
        self._interval = interval
        self._pending = 0
        self._last = time.monotonic()

    def __call__(self, n: int) -> None:
        self._pending += n
        now = time.monotonic()
        if now - self._last >= self._interval:
            self.flush()
            self._last = now

    def flush(self) -> None:
        if self._pending:
            self._send(self._pending)
            self._pending = 0
