"""In-process backends: ``thread`` (a thread pool in the caller's process) and
``sequential`` (one item after another); both are importable from
:mod:`shardwise.parallel.backends.local` too."""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any

from shardwise.parallel import _in_worker
from shardwise.parallel._in_worker import Outcome, run_chunk
from shardwise.parallel.backend import Backend, Finished, Session
from shardwise.parallel.cpus import cpu_count

__all__ = ["SequentialBackend", "ThreadBackend"]


class _ExecutorSession(Session):
    def __init__(self, executor: ThreadPoolExecutor | None, fn: Any, retry_on: Any) -> None:
        self.executor = executor
        self.fn = fn
        self.retry_on = retry_on
        self.futures: dict[Future[list[Outcome]], int] = {}
        self.queue: queue.SimpleQueue[tuple[int, Sequence[tuple[int, Any]]]] = queue.SimpleQueue()
        self.count = 0
        self._lock = threading.Lock()

    def _add(self, n: int) -> None:
        with self._lock:
            self.count += n

    def _run(self, chunk: Sequence[tuple[int, Any]]) -> list[Outcome]:
        _in_worker.set_reporter(self._add)
        return run_chunk(self.fn, chunk, self.retry_on)

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        if self.executor is None:
            self.queue.put((chunk_id, chunk))
        else:
            self.futures[self.executor.submit(self._run, chunk)] = chunk_id

    def wait(self, timeout: float) -> list[Finished]:
        if self.executor is None:
            try:
                chunk_id, chunk = self.queue.get_nowait()
            except queue.Empty:
                return []
            return [(chunk_id, self._run(chunk))]
        if not self.futures:
            return []
        done, _ = futures_wait(list(self.futures), timeout, return_when=FIRST_COMPLETED)
        return [(self.futures.pop(f), f.result()) for f in done]

    def counters(self) -> int:
        with self._lock:
            n, self.count = self.count, 0
        return n

    def close(self, cancel: bool) -> None:
        _in_worker.set_reporter(None)
        for f in self.futures:
            f.cancel()
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)


class ThreadBackend(Backend):
    """Threads in the caller's process: for I/O-bound work and functions that release the GIL."""

    name = "thread"
    in_process = True

    def slots(self) -> int:
        return self.n_jobs or max(4, cpu_count() * 4)

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _ExecutorSession(ThreadPoolExecutor(parallelism, "shardwise"), fn, retry_on)

    def default_chunksize(self, n_items: int | None, parallelism: int) -> int:
        return 1


class SequentialBackend(Backend):
    """One item after another in the caller's process: for debugging and tiny inputs."""

    name = "sequential"
    in_process = True

    def slots(self) -> int:
        return 1

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _ExecutorSession(None, fn, retry_on)
