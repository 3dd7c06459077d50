"""Where and how a run's parallel work goes: :class:`Execution`, which every pipeline stage
(reading, operators, dedup, commit) runs its tasks through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shardwise.errors import ConfigError
from shardwise.ops.operators import Op
from shardwise.parallel import BackendSpec, active_backend, parallel_map
from shardwise.parallel._in_worker import by_value
from shardwise.parallel._registry import _backend_class
from shardwise.parallel.backend import Backend

__all__ = ["Execution"]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Execution:
    """Where and how a run's parallel work goes (the user's backend choice)."""

    backend: BackendSpec = None
    num_proc: int | None = None
    progress: bool = True

    def map(self, fn: Callable[[T], R], items: Sequence[T], desc: str) -> list[R]:
        """``fn`` over ``items`` on the backend, one item per task, in order."""
        return parallel_map(
            fn,
            items,
            backend=self.backend,
            num_proc=self.num_proc,
            desc=desc,
            progress=self.progress,
            chunksize=1,
        )

    def in_process(self) -> bool:
        """Whether the tasks run in this process (the thread and sequential backends), so
        nothing of them is pickled."""
        spec = self.backend if self.backend is not None else active_backend()
        if spec is None:
            return False
        cls = type(spec) if isinstance(spec, Backend) else _backend_class(spec)
        return cls.in_process

    def check_picklable(self, ops: Sequence[Op]) -> None:
        """Refuse, before any task starts, an operator the backend could not send to its
        workers (pickled as the backends do, with cloudpickle), naming it."""
        if self.in_process():
            return
        for op in ops:
            try:
                by_value((op.fn, op.kwargs))
            except Exception as exc:
                raise ConfigError(
                    f"operator {op.name!r} cannot be pickled ({type(exc).__name__}: {exc}); "
                    "operators run in worker processes and must be picklable: create objects "
                    "such as locks, open files, connections or clients inside the function "
                    "(or on first use in each worker) instead of capturing them"
                ) from exc
