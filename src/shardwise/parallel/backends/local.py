"""In-machine backends: ``local`` (process pool), ``thread`` and ``sequential``.

The local pool is shardwise's own: one socket per worker, so the driver always knows
which chunk a worker holds. When a worker dies (SIGKILL, OOM killer) its chunk, and only
its chunk, is reported lost and the worker is replaced by a fresh process. Workers are
fresh interpreters that never run the caller's ``__main__`` (see
:mod:`shardwise.parallel.backends.local_procs`): functions from a script without a ``__main__``
guard,
a notebook, ``python -c`` or stdin travel by value, and starting workers is safe when the
caller has threads (tokenizers, Arrow thread pools, gRPC).
"""

from __future__ import annotations

import atexit
import multiprocessing.connection as mpc
import pickle
import threading
from collections.abc import Sequence
from typing import Any

from shardwise.parallel._in_worker import by_value
from shardwise.parallel.backend import Backend, Finished, Session, WorkerLost
from shardwise.parallel.backends.local_caller import CallerSlot
from shardwise.parallel.backends.local_procs import WorkerProcess, WorkerStartError
from shardwise.parallel.backends.local_worker import dumps
from shardwise.parallel.backends.threads import SequentialBackend, ThreadBackend
from shardwise.parallel.cpus import cpu_count

__all__ = ["LocalBackend", "SequentialBackend", "ThreadBackend", "caller_pool"]


class _Worker:
    """A pool worker (see :mod:`shardwise.parallel.backends.local_procs`) and the chunk it holds."""

    def __init__(self, wait: bool = True) -> None:
        self.proc = WorkerProcess(wait)
        self.started = wait  # its "ready" message has come (else still to come)
        self.ready = wait  # it may be sent chunks (a warming worker: once its "loaded" came)
        self.conn = self.proc.conn
        self.fn_key = -1
        self.chunk_id: int | None = None

    def stop(self, kill: bool) -> None:
        if not kill:
            try:
                self.conn.send_bytes(dumps(("stop",)))
            except OSError:
                kill = True
            self.proc.join(5)
        self.proc.kill()
        self.proc.close()


def _warm_up(w: _Worker) -> None:
    """A starting worker's next message: "ready" (it started; raises
    :class:`WorkerStartError` if it died first), then "loaded" (it may take chunks)."""
    if not w.started:
        w.proc.wait_ready()
        w.started = True
        if not w.conn.poll():
            return
    try:
        kind = pickle.loads(w.conn.recv_bytes())[0]
    except (EOFError, OSError):
        w.proc.join(1)
        raise WorkerStartError(
            f"a local worker process died while loading its function: {w.proc.describe()}"
        ) from None
    w.ready = kind == "loaded"


class _LocalSession(Session):
    def __init__(self, backend: LocalBackend, fn: Any, retry_on: Any, parallelism: int) -> None:
        self.backend = backend
        backend._fn_key += 1
        self.key = backend._fn_key
        self.blob = dumps(("fn", self.key, by_value((fn, retry_on))))
        self.count = 0
        self._count_lock = threading.Lock()
        here = bool(backend.options.get("caller_slot")) and parallelism > 1
        self.here = CallerSlot(fn, retry_on, self._add) if here else None
        # with the caller as a slot, chunks start there while the workers are starting
        self.workers = backend._take_workers(
            parallelism - 1 if here else parallelism, wait=not here
        )
        self.pending: list[tuple[int, Sequence[tuple[int, Any]]]] = []
        for w in (
            self.workers
        ):  # a starting worker loads the function (its imports) before taking chunks
            if not w.ready:
                w.conn.send_bytes(dumps(("fn", self.key, by_value((fn, retry_on)), True)))
                w.fn_key = self.key

    def _add(self, n: int) -> None:
        with self._count_lock:
            self.count += n

    def _dispatch(self) -> None:
        for w in self.workers:
            if not self.pending:
                return
            if w.ready and w.chunk_id is None:
                chunk_id, chunk = self.pending.pop(0)
                if w.fn_key != self.key:
                    w.conn.send_bytes(self.blob)
                    w.fn_key = self.key
                w.conn.send_bytes(dumps(("chunk", self.key, chunk_id, chunk)))
                w.chunk_id = chunk_id
        if self.pending and self.here is not None and self.here.chunk_id is None:
            self.here.start(*self.pending.pop(0))

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        self.pending.append((chunk_id, chunk))
        self._dispatch()

    def wait(self, timeout: float) -> list[Finished]:
        handles: list[Any] = [w.conn for w in self.workers if w.chunk_id is not None or not w.ready]
        if self.here is not None and self.here.chunk_id is not None:
            handles.append(self.here.signal)
        if not handles:
            return []
        ready = set(mpc.wait(handles, timeout))
        for w in self.workers:
            if not w.ready and w.conn in ready:
                _warm_up(w)
        done: list[Finished] = []
        if self.here is not None and self.here.signal in ready:
            done.append(self.here.finish())
        done.extend(self._collect(ready))
        self._dispatch()
        return done

    def _collect(self, ready: set[Any]) -> list[Finished]:
        """Finished chunks of the workers whose sockets are ``ready``; a lost worker's
        chunk is reported lost and the worker replaced."""
        done: list[Finished] = []
        for i, w in enumerate(list(self.workers)):
            if w.chunk_id is None or w.conn not in ready:
                continue
            lost = False
            try:
                while w.conn.poll():
                    msg = pickle.loads(w.conn.recv_bytes())
                    if msg[0] == "count":
                        self._add(msg[1])
                    elif msg[0] == "done":
                        done.append((msg[1], msg[2]))
                        w.chunk_id = None
                        break
            except (EOFError, OSError):
                lost = True
            if w.chunk_id is not None and (lost or not w.proc.is_alive()):
                w.proc.join(1)
                done.append((w.chunk_id, WorkerLost(w.proc.describe())))
                w.stop(kill=True)
                self.workers[i] = _Worker()
        return done

    def counters(self) -> int:
        with self._count_lock:
            n, self.count = self.count, 0
        return n

    def close(self, cancel: bool) -> None:
        if cancel:
            for i, w in enumerate(self.workers):
                if w.chunk_id is not None:
                    w.stop(kill=True)
                    self.workers[i] = _Worker()
        if self.here is not None:
            self.here.close()
        self.backend._return_workers(self.workers)


class LocalBackend(Backend):
    """A pool of worker processes on this machine (the default backend).

    With the option ``caller_slot=True`` the calling process is one of the ``n_jobs``
    slots: one worker process fewer is started, and the caller runs chunks on a thread
    while the workers start (for shardwise's own tasks; see :func:`caller_pool`)."""

    name = "local"

    def __init__(self, n_jobs: int | None = None, **options: Any) -> None:
        super().__init__(n_jobs, **options)
        self._idle: list[_Worker] = []
        self._fn_key = 0
        self._lock = threading.Lock()

    def slots(self) -> int:
        return self.n_jobs or cpu_count()

    def _take_workers(self, n: int, wait: bool = True) -> list[_Worker]:
        """``n`` workers, idle ones first; with ``wait`` all ready for work, else fresh
        ones may still be starting (:attr:`_Worker.ready` says)."""
        with self._lock:
            alive = [w for w in self._idle if w.proc.is_alive()]
            for w in self._idle:
                if w not in alive:
                    w.stop(kill=True)
            taken, self._idle = alive[:n], alive[n:]
        fresh = [
            _Worker(wait=False) for _ in range(n - len(taken))
        ]  # interpreters start side by side
        try:
            for w in (taken + fresh) if wait else ():
                if not w.started:
                    w.proc.wait_ready()
                w.started = w.ready = (
                    True  # a "loaded" still to come is skipped like any other message
                )
        except BaseException:
            for w in fresh:
                w.proc.kill()
            raise
        return taken + fresh

    def _return_workers(self, workers: list[_Worker]) -> None:
        with self._lock:
            self._idle.extend(workers)

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _LocalSession(self, fn, retry_on, parallelism)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for w in idle:
            w.stop(kill=False)


_caller_pool: LocalBackend | None = None
_caller_pool_lock = threading.Lock()


def caller_pool() -> LocalBackend:
    """The process-wide ``LocalBackend(caller_slot=True)`` (closed at exit): the pool a
    pipeline of shardwise's own operators uses for a mid-sized input."""
    global _caller_pool
    with _caller_pool_lock:
        if _caller_pool is None:
            _caller_pool = LocalBackend(caller_slot=True)
            atexit.register(_caller_pool.close)
        return _caller_pool
