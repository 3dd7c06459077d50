"""One ``parallel_map`` over local processes, threads, joblib, Ray, Spark and Dask.

>>> from shardwise.parallel import parallel_map, parallel_backend
>>> parallel_map(abs, [-1, 2, -3], backend="sequential", progress=False)
[1, 2, 3]

Failure semantics are the same on every backend: a task whose worker dies is retried on
a fresh worker up to ``max_retries`` times; an exception of the function is not retried
(unless its type is in ``retry_on``) and reaches the caller as :class:`TaskError` with
the item's index and the remote traceback; Ctrl-C cancels outstanding work. The
``thread`` and ``sequential`` backends run in the caller's process, so for them a killed
worker is the caller itself.

The engines are the sub-package :mod:`shardwise.parallel.backends`; the core (the driver
loop, the registry, the backend interface in :mod:`.backend`, what runs in a worker in
:mod:`._in_worker`) imports none of them.

May import: ``shardwise.errors`` and ``shardwise._optional`` (see ``docs/layers.toml``).
"""

from shardwise.parallel._driver import (
    active_backend,
    get_backend,
    imap_unordered,
    known_backends,
    parallel_backend,
    parallel_map,
    register_backend,
    step_backends,
)
from shardwise.parallel._in_worker import report
from shardwise.parallel.backend import Backend, BackendSpec, Session, WorkerLost

__all__ = [
    "Backend",
    "BackendSpec",
    "Session",
    "WorkerLost",
    "active_backend",
    "get_backend",
    "imap_unordered",
    "known_backends",
    "parallel_backend",
    "parallel_map",
    "register_backend",
    "report",
    "step_backends",
]
