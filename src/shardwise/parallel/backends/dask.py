"""``dask``: one Dask task per chunk on a ``distributed.Client``.

Pass ``client=`` to use a cluster you already have, or the client found by
``distributed.get_client()`` is used; otherwise a ``LocalCluster`` on 127.0.0.1 is
started and closed with the backend.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from shardwise._optional import require
from shardwise.parallel._in_worker import main_not_reimported, run_chunk
from shardwise.parallel.backend import Backend, Finished, Session, WorkerLost
from shardwise.parallel.cpus import cpu_count

__all__ = ["DaskBackend"]
_NOISY = ("distributed", "tornado")
# how to get a module the driver imports onto the workers
SHIP_HINT = (
    "on Dask, client.upload_file(the module's file) or install it in the workers' environment"
)


def _job(fn: Any, retry_on: Any, chunk: Sequence[tuple[int, Any]], topic: str) -> Any:
    """Run a chunk; what it passes to ``report`` goes to the driver as events on ``topic``
    (worker -> scheduler -> the subscribed client), batched every 0.2 s."""
    from distributed import get_worker

    from shardwise.parallel import _in_worker

    worker = get_worker()
    sink = _in_worker.Throttled(lambda n: worker.log_event(topic, n))
    _in_worker.set_reporter(sink)
    try:
        return run_chunk(fn, chunk, retry_on)
    finally:
        sink.flush()
        _in_worker.set_reporter(None)


class _DaskSession(Session):
    def __init__(self, client: Any, fn: Any, retry_on: Any) -> None:
        self.distributed = require("distributed", "the dask backend")
        self.client = client
        self.fn = fn
        self.fn_future = self._scatter()
        self.retry_on = retry_on
        self.futures: dict[Any, int] = {}
        # running tasks' counters arrive as events on a topic of this session
        self.topic = f"shardwise-progress-{uuid.uuid4().hex[:12]}"
        self._count = 0
        self._lock = threading.Lock()
        client.subscribe_topic(self.topic, self._on_event)

    def _on_event(self, event: tuple[float, Any]) -> None:
        with self._lock:
            self._count += int(event[1])

    def counters(self) -> int:
        with self._lock:
            n, self._count = self._count, 0
        return n

    def _scatter(self) -> Any:
        [fut] = self.client.scatter([self.fn], broadcast=True, hash=False)
        return fut

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        if self.fn_future.status != "finished":  # its holder died: scatter again
            self.fn_future = self._scatter()
        fut = self.client.submit(
            _job, self.fn_future, self.retry_on, list(chunk), self.topic, pure=False, retries=0
        )
        self.futures[fut] = chunk_id

    def wait(self, timeout: float) -> list[Finished]:
        if not self.futures:
            return []
        try:
            done, _ = self.distributed.wait(
                list(self.futures), timeout=timeout, return_when="FIRST_COMPLETED"
            )
        except TimeoutError:
            return []
        except self.distributed.client.FuturesCancelledError:
            # a lost worker took the scattered function with it and dask cancelled the
            # tasks that needed it; report them as lost so the driver resubmits them
            done = [f for f in self.futures if f.status != "pending"]
        out: list[Finished] = []
        for fut in done:
            cid = self.futures.pop(fut)
            try:
                out.append((cid, fut.result()))
            except Exception as exc:  # noqa: BLE001 - KilledWorker, lost worker
                out.append((cid, WorkerLost.of(exc, SHIP_HINT)))
        return out

    def close(self, cancel: bool) -> None:
        if cancel and self.futures:
            self.client.cancel(list(self.futures))
        self.futures.clear()
        try:
            self.client.unsubscribe_topic(self.topic)
        except Exception:  # noqa: BLE001 - the client is already closed
            pass


def _noisy_loggers() -> list[logging.Logger]:
    """Dask's and tornado's loggers in this process, the parents and any child with its
    own level."""
    names = [n for n in logging.root.manager.loggerDict if n.split(".")[0] in _NOISY]
    return [logging.getLogger(n) for n in {"distributed", "tornado", *names}]


def _quiet_logs() -> None:
    """Silence Dask's loggers in a worker about to close: a heartbeat that races the
    scheduler's shutdown logs a traceback although nothing failed."""
    for lg in _noisy_loggers():
        lg.setLevel(logging.CRITICAL)


@contextlib.contextmanager
def _quiet_shutdown(client: Any) -> Iterator[None]:
    """Quiet an owned cluster's workers, and this process's Dask loggers (the scheduler
    and the nannies live here) while it closes; the latter are restored after."""
    try:
        client.run(_quiet_logs)
    except Exception:  # noqa: BLE001 - a worker already gone needs no quieting
        pass
    loggers = _noisy_loggers()
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


class DaskBackend(Backend):
    """Run on Dask distributed. Options: ``client`` (an existing ``distributed.Client``)."""

    name = "dask"

    def __init__(self, n_jobs: int | None = None, **options: Any) -> None:
        super().__init__(n_jobs, **options)
        self.distributed = require("distributed", "the dask backend")
        self._client: Any = options.get("client")
        self._owned: list[Any] = []

    def client(self) -> Any:
        if self._client is None:
            try:
                self._client = self.distributed.get_client()
            except ValueError:
                with main_not_reimported():
                    cluster = self.distributed.LocalCluster(
                        n_workers=self.n_jobs or cpu_count(),
                        threads_per_worker=1,
                        processes=True,
                        host="127.0.0.1",
                        dashboard_address=None,
                    )
                self._client = self.distributed.Client(cluster)
                self._owned = [self._client, cluster]
        return self._client

    def slots(self) -> int:
        total = sum(self.client().nthreads().values()) or 1
        return min(total, self.n_jobs) if self.n_jobs else total

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _DaskSession(self.client(), fn, retry_on)

    def close(self) -> None:
        if self._owned:
            with _quiet_shutdown(self._owned[0]):
                for obj in self._owned:
                    obj.close()
        if self._owned:
            self._client = None
        self._owned = []
