"""The driver loop shared by every backend: chunking, bounded in-flight work, retries of
lost workers, errors with the item index, progress (:mod:`._progress`) and Ctrl-C
cancellation."""

from __future__ import annotations

import inspect
import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

from shardwise.errors import ConfigError, TaskError
from shardwise.parallel._in_worker import Outcome
from shardwise.parallel._progress import progress_bar
from shardwise.parallel._registry import (
    _resolve,
    active_backend,
    get_backend,
    known_backends,
    parallel_backend,
    register_backend,
    step_backends,
)
from shardwise.parallel.backend import Backend, BackendSpec, Session, WorkerLost

__all__ = [
    "active_backend",
    "get_backend",
    "imap_unordered",
    "known_backends",
    "parallel_backend",
    "parallel_map",
    "register_backend",
    "step_backends",
]

T = TypeVar("T")
R = TypeVar("R")


def imap_unordered(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    num_proc: int | None = None,
    desc: str | None = None,
    backend: BackendSpec = None,
    progress: bool = True,
    chunksize: int | None = None,
    max_retries: int = 3,
    retry_on: tuple[type[BaseException], ...] = (),
    max_in_flight: int | None = None,
    count_unit: str | None = None,
) -> Iterator[tuple[int, R]]:
    """Apply ``fn`` to every item in parallel; yield ``(index, result)`` as tasks finish.

    Items are pulled lazily, so at most ``max_in_flight`` chunks (default two per slot)
    exist at once and a million items never sit in memory together.

    Args:
        fn: a function of one item; module-level functions work everywhere, closures need
            cloudpickle (which every cluster engine ships).
        items: any iterable.
        num_proc: tasks at once; ``None`` = the backend's slots, ``-1`` = all cores/slots.
        desc: progress bar title.
        backend: a name, an instance, or ``None`` for the active one (default ``local``).
        progress: show a tqdm bar of finished tasks.
        chunksize: items per chunk sent to a worker (default: chosen from the input size).
        max_retries: times a task whose worker died is retried on a fresh worker.
        retry_on: exception types of ``fn`` that are transient and retried the same way.
        max_in_flight: chunks submitted and not yet finished.
        count_unit: if set, show a second figure with what tasks pass to
            :func:`shardwise.parallel.report` (e.g. ``"rows"``).

    Raises:
        Exception: what ``fn`` raised (not transient, or still failing after ``max_retries``
            retries), as itself, with ``task_index`` and ``remote_traceback`` attributes.
        TaskError: a task's worker was lost ``max_retries + 1`` times, or the exception
            could not be sent back; carries the item's index and the remote traceback.
    """
    if not callable(fn):
        raise ConfigError(
            f"parallel_map needs a function of one item first, got {type(fn).__name__}"
        )
    if not isinstance(items, Iterable):
        raise ConfigError(f"parallel_map needs an iterable of items, got {type(items).__name__}")
    inst = _resolve(backend)
    slots = inst.slots()
    parallelism = slots if num_proc in (None, -1) else max(1, min(int(num_proc), slots))
    if num_proc is not None and num_proc != -1 and num_proc < 1:
        raise ConfigError(f"num_proc must be -1 or at least 1, got {num_proc}")
    try:
        total: int | None = len(items)  # type: ignore[arg-type]
    except TypeError:
        total = None
    size = chunksize or inst.default_chunksize(total, parallelism)
    limit = max_in_flight or parallelism * 2
    return _run(
        inst,
        fn,
        iter(items),
        total,
        size,
        limit,
        parallelism,
        desc,
        progress,
        max_retries,
        retry_on,
        count_unit,
    )


def _run(
    inst: Backend,
    fn: Callable[[Any], Any],
    source: Iterator[Any],
    total: int | None,
    size: int,
    limit: int,
    parallelism: int,
    desc: str | None,
    progress: bool,
    max_retries: int,
    retry_on: tuple[type[BaseException], ...],
    count_unit: str | None,
) -> Iterator[tuple[int, Any]]:
    bar = progress_bar(total, desc, progress)
    counter_bar: Any = None
    if count_unit:  # what tasks report (rows, ...), counted as they run
        counter_bar = progress_bar(None, f"{desc or 'tasks'} ({count_unit})", progress, count_unit)
    flight = _InFlight(inst.open(fn, retry_on, parallelism), bar, max_retries)
    numbered = enumerate(source)
    exhausted = False
    cancel = True
    try:
        while True:
            exhausted = exhausted or flight.fill(numbered, size, limit)
            if not flight.chunks:
                break
            for cid, result in flight.session.wait(0.5):
                yield from flight.settle(cid, result)
            if counter_bar is not None:
                counter_bar.update(flight.session.counters())
        cancel = False
    finally:
        if counter_bar is not None:
            counter_bar.update(flight.session.counters())
            counter_bar.close()
        flight.session.close(cancel=cancel)
        bar.close()


class _InFlight:
    """The chunks a session is running, and how often each was tried."""

    def __init__(self, session: Session, bar: Any, max_retries: int) -> None:
        self.session = session
        self.bar = bar
        self.max_retries = max_retries
        self.chunks: dict[int, list[tuple[int, Any]]] = {}
        self.attempts: dict[int, int] = {}
        self.ids = itertools.count()

    def fill(self, numbered: Iterator[tuple[int, Any]], size: int, limit: int) -> bool:
        """Submit chunks up to ``limit`` in flight; True once the items are exhausted."""
        while len(self.chunks) < limit:
            chunk = list(itertools.islice(numbered, size))
            if not chunk:
                return True
            cid = next(self.ids)
            self.chunks[cid], self.attempts[cid] = chunk, 0
            self.session.submit(cid, chunk)
        return False

    def settle(self, cid: int, result: list[Outcome] | WorkerLost) -> list[tuple[int, Any]]:
        """What a finished chunk yields; a lost worker or a transient error runs the chunk
        (or its failed items) again, up to ``max_retries``; other errors are raised."""
        chunk = self.chunks[cid]
        if isinstance(result, WorkerLost):
            if result.missing:  # the same on every worker: retrying cannot help
                raise TaskError(
                    f"a worker could not import module {result.missing!r} to load the task; "
                    "the module is importable here but not on the workers: ship it to them "
                    f"({result.hint})",
                    chunk[0][0],
                    result.reason,
                )
            self.attempts[cid] += 1
            if self.attempts[cid] > self.max_retries:
                raise TaskError(
                    f"worker lost {self.attempts[cid]} times ({result.reason}); giving up",
                    chunk[0][0],
                )
            self.session.submit(cid, chunk)
            return []
        failed = [o for o in result if not o.ok and not o.transient]
        if failed:
            failed[0].raise_error()
        done = [(o.index, o.value) for o in result if o.ok]
        self.bar.update(len(done))
        retry = [o for o in result if not o.ok]
        if retry:
            self.attempts[cid] += 1
            if self.attempts[cid] > self.max_retries:
                retry[0].raise_error()
            ok = {i for i, _ in done}
            self.chunks[cid] = [(i, x) for i, x in chunk if i not in ok]
            self.session.submit(cid, self.chunks[cid])
        else:
            del self.chunks[cid], self.attempts[cid]
        return done


def _check_options(caller: str, options: dict[str, Any]) -> None:
    known = [p for p in inspect.signature(imap_unordered).parameters if p not in ("fn", "items")]
    for key in options:
        if key not in known:
            import difflib

            near = difflib.get_close_matches(key, known, n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            if difflib.get_close_matches(key, ["n_jobs"], n=1):
                hint = " (did you mean 'num_proc'? n_jobs is parallel_backend()'s)"
            raise ConfigError(f"{caller}() got an unexpected keyword argument {key!r}{hint}")


def parallel_map(
    fn: Callable[[T], R],
    items: Iterable[T],
    *,
    num_proc: int | None = None,
    desc: str | None = None,
    backend: BackendSpec = None,
    progress: bool = True,
    **options: Any,
) -> list[R]:
    """Apply ``fn`` to every item in parallel and return the results in input order.

    Takes the same arguments as :func:`imap_unordered`.
    """
    _check_options("parallel_map", options)
    results: dict[int, R] = {}
    for index, value in imap_unordered(
        fn, items, num_proc=num_proc, desc=desc, backend=backend, progress=progress, **options
    ):
        results[index] = value
    return [results[i] for i in range(len(results))]
