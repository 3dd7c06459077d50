"""``joblib``: any registered joblib backend (``loky`` by default).

joblib has no submit-one-task API, so chunks run in waves: each wave is one
``Parallel(return_as="generator_unordered")`` call in a helper thread. A worker death
ends the wave; the chunks it had not returned are reported lost and retried.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

from shardwise._optional import require
from shardwise.parallel._in_worker import run_chunk
from shardwise.parallel.backend import Backend, Finished, Session, WorkerLost
from shardwise.parallel.cpus import cpu_count

__all__ = ["JoblibBackend"]
# how to get a module the driver imports onto the workers
SHIP_HINT = "install it in the environment, or put its directory on PYTHONPATH before starting"


def _job(
    fn: Any, retry_on: Any, chunk_id: int, chunk: Sequence[tuple[int, Any]]
) -> tuple[int, Any]:
    return chunk_id, run_chunk(fn, chunk, retry_on)


class _JoblibSession(Session):
    def __init__(self, backend: JoblibBackend, fn: Any, retry_on: Any, parallelism: int) -> None:
        self.joblib = require("joblib", "the joblib backend")
        self.backend = backend
        self.fn, self.retry_on, self.parallelism = fn, retry_on, parallelism
        self.pending: list[tuple[int, Sequence[tuple[int, Any]]]] = []
        self.results: queue.SimpleQueue[Finished | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None

    def _wave(self, wave: list[tuple[int, Sequence[tuple[int, Any]]]]) -> None:
        joblib = self.joblib
        left = {cid for cid, _ in wave}
        try:
            par = joblib.Parallel(
                n_jobs=self.parallelism,
                backend=self.backend.options.get("backend", "loky"),
                return_as="generator_unordered",
            )
            for cid, outcomes in par(
                joblib.delayed(_job)(self.fn, self.retry_on, c, ch) for c, ch in wave
            ):
                left.discard(cid)
                self.results.put((cid, outcomes))
        except Exception as exc:  # noqa: BLE001 - a dead worker ends the wave
            for cid in left:
                self.results.put((cid, WorkerLost.of(exc, SHIP_HINT)))
        finally:
            self.results.put(None)

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        self.pending.append((chunk_id, chunk))

    def wait(self, timeout: float) -> list[Finished]:
        if self.thread is None and self.pending:
            wave, self.pending = self.pending, []
            self.thread = threading.Thread(target=self._wave, args=(wave,), daemon=True)
            self.thread.start()
        if self.thread is None:
            return []
        out: list[Finished] = []
        try:
            item = self.results.get(timeout=timeout)
            while True:
                if item is None:
                    self.thread.join()
                    self.thread = None
                    break
                out.append(item)
                item = self.results.get_nowait()
        except queue.Empty:
            pass
        return out

    def close(self, cancel: bool) -> None:
        if self.thread is not None and not cancel:
            self.thread.join()


class JoblibBackend(Backend):
    """Run on joblib. Options: ``backend`` (a registered joblib backend, default ``loky``)."""

    name = "joblib"

    def slots(self) -> int:
        return self.n_jobs or cpu_count()

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _JoblibSession(self, fn, retry_on, parallelism)

    def default_chunksize(self, n_items: int | None, parallelism: int) -> int:
        if n_items is None:
            return 16
        return max(1, min(1024, n_items // (parallelism * 4)))
