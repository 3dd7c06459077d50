"""Where and how a run's parallel work goes: :class:`Execution`, which every pipeline stage
(reading, operators, dedup, commit) runs its tasks through."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from shardwise.parallel import BackendSpec, parallel_map

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
