"""The calling process as one slot of the ``local`` pool (``LocalBackend(caller_slot=True)``).

A pool that takes the caller's process as one of its slots starts one interpreter less
(each costs its imports, a few tenths of a second of a core), and the caller's slot
starts on the first chunk at once while the workers are still starting. Pipelines use it
for their own operators on mid-sized inputs (:mod:`shardwise.pipeline.runner`), where a
worker's start is a visible share of the run; a user's function always runs in workers.
The caller then keeps freed memory for the next task as the workers do
(:mod:`shardwise.parallel._malloc`).
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import threading
from collections.abc import Callable, Sequence
from typing import Any

from shardwise.parallel._in_worker import Outcome, run_chunk
from shardwise.parallel._malloc import keep_freed_memory

__all__ = ["CallerSlot"]


class CallerSlot:
    """Runs one chunk at a time on a thread of the calling process; :attr:`signal` becomes
    readable (for :func:`multiprocessing.connection.wait`) when the chunk is done."""

    def __init__(
        self,
        fn: Callable[[Any], Any],
        retry_on: tuple[type[BaseException], ...],
        count: Callable[[int], None],
    ) -> None:
        self.fn, self.retry_on, self.count = fn, retry_on, count
        keep_freed_memory()  # as in the pool's workers: shardwise's own array-heavy tasks run here
        self.signal, self._done = mpc.Pipe(duplex=False)
        self.chunk_id: int | None = None
        self._thread: threading.Thread | None = None
        self._result: list[Outcome] | BaseException | None = None

    def start(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        """Run ``chunk`` on the slot's thread (the slot must be idle)."""
        self.chunk_id, self._result = chunk_id, None
        self._thread = threading.Thread(
            target=self._run, args=(chunk,), name="shardwise-caller-slot", daemon=True
        )
        self._thread.start()

    def _run(self, chunk: Sequence[tuple[int, Any]]) -> None:
        from shardwise.parallel import _in_worker

        _in_worker.set_reporter(self.count)
        try:
            self._result = run_chunk(self.fn, chunk, self.retry_on)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            self._result = exc
        finally:
            _in_worker.set_reporter(None)
            self._done.send_bytes(b"")

    def finish(self) -> tuple[int, list[Outcome]]:
        """``(chunk_id, outcomes)`` of the finished chunk (call once :attr:`signal` is
        readable); the slot is idle again. What escaped ``run_chunk`` is raised here."""
        self.signal.recv_bytes()
        if self._thread is not None:
            self._thread.join()
        chunk_id, result = self.chunk_id, self._result
        self.chunk_id, self._thread, self._result = None, None, None
        if isinstance(result, BaseException):
            raise result
        if chunk_id is None or result is None:
            raise RuntimeError("the caller's slot finished without a chunk")
        return chunk_id, result

    def close(self) -> None:
        """Wait for a running chunk (a thread cannot be stopped) and release the pipe."""
        if self._thread is not None:
            self._thread.join()
        self.signal.close()
        self._done.close()
