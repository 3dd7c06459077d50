"""Which backend runs: the name registry, shared instances per name, and the
``parallel_backend`` blocks (for all parallel work, or for named steps only)."""

from __future__ import annotations

import atexit
import contextlib
import contextvars
import importlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

from shardwise.errors import ConfigError
from shardwise.parallel.backend import Backend, BackendSpec

_REGISTRY: dict[str, str | type[Backend]] = {
    "local": "shardwise.parallel.backends.local:LocalBackend",
    "thread": "shardwise.parallel.backends.local:ThreadBackend",
    "sequential": "shardwise.parallel.backends.local:SequentialBackend",
    "joblib": "shardwise.parallel.backends.joblib:JoblibBackend",
    "ray": "shardwise.parallel.backends.ray:RayBackend",
    "spark": "shardwise.parallel.backends.spark:SparkBackend",
    "dask": "shardwise.parallel.backends.dask:DaskBackend",
}
_ACTIVE: contextvars.ContextVar[Backend | None] = contextvars.ContextVar(
    "shardwise_backend", default=None
)
# backends chosen for named steps only (``parallel_backend(..., steps=[...])``)
_STEPS: contextvars.ContextVar[dict[str, Backend] | None] = contextvars.ContextVar(
    "shardwise_steps", default=None
)
_SHARED: dict[str, Backend] = {}
_SHARED_LOCK = threading.Lock()


def register_backend(name: str, cls: type[Backend]) -> None:
    """Make ``cls`` available under ``name`` for ``backend=`` and :func:`parallel_backend`."""
    _REGISTRY[name] = cls


def known_backends() -> list[str]:
    """Names accepted by ``backend=``."""
    return sorted(_REGISTRY)


def _backend_class(name: str) -> type[Backend]:
    try:
        target = _REGISTRY[name]
    except KeyError:
        raise ConfigError(
            f"unknown backend {name!r}; known backends: {', '.join(known_backends())}"
        ) from None
    if isinstance(target, str):
        module, _, attr = target.partition(":")
        target = getattr(importlib.import_module(module), attr)
        _REGISTRY[name] = target
    return target


def get_backend(name: str, n_jobs: int | None = None, **options: Any) -> Backend:
    """Create a backend by name (a new instance; close it when done)."""
    return _backend_class(name)(n_jobs, **options)


def _shared(name: str) -> Backend:
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = get_backend(name)
        return _SHARED[name]


@atexit.register
def _close_shared() -> None:
    for b in list(_SHARED.values()):
        with contextlib.suppress(Exception):
            b.close()
    _SHARED.clear()


def active_backend() -> Backend | None:
    """The backend set by the innermost :func:`parallel_backend`, or None."""
    return _ACTIVE.get()


@contextlib.contextmanager
def parallel_backend(
    backend: str | Backend,
    n_jobs: int | None = -1,
    *,
    steps: Sequence[str] | None = None,
    **options: Any,
) -> Iterator[Backend]:
    """Run shardwise's parallel work inside the block on ``backend``.

    Applies to every call that does not pass ``backend=`` itself, including calls made
    deep inside shardwise (``index_dataset``, pipeline runs). Blocks nest; leaving one
    restores the previous backend and releases what this one started.

    With ``steps=`` the backend applies to those named steps only (for
    :func:`shardwise.prepare`: ``"download"``, ``"convert"``, ``"index"``, and
    ``"prepare"`` for convert and index); every other parallel call inside the block keeps
    the backend it had outside it (the local process pool by default).

    Args:
        backend: a name from :func:`known_backends` or a :class:`Backend` instance.
        n_jobs: parallelism; ``-1`` means all cores of the machine or slots of the cluster.
        steps: the names of the steps this backend runs (default: all parallel work).
        **options: backend options (e.g. ``client=`` for dask, ``spark=`` for spark).
    """
    if steps is not None and (
        isinstance(steps, str) or not steps or not all(isinstance(s, str) for s in steps)
    ):
        raise ConfigError(f"steps must be a non-empty list of step names, got {steps!r}")
    owned = not isinstance(backend, Backend)
    inst = backend if isinstance(backend, Backend) else get_backend(backend, n_jobs, **options)
    if steps is None:
        token: contextvars.Token[Any] = _ACTIVE.set(inst)
    else:
        token = _STEPS.set({**(_STEPS.get() or {}), **dict.fromkeys(steps, inst)})
    try:
        yield inst
    finally:
        if steps is None:
            _ACTIVE.reset(token)
        else:
            _STEPS.reset(token)
        if owned:
            inst.close()


def step_backends() -> dict[str, Backend]:
    """The backends the enclosing ``parallel_backend(..., steps=[...])`` blocks chose, by step."""
    return dict(_STEPS.get() or {})


def _resolve(backend: BackendSpec) -> Backend:
    if isinstance(backend, Backend):
        return backend
    if backend is not None:
        return _shared(backend)
    return _ACTIVE.get() or _shared("local")
