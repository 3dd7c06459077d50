"""The dedup contract: operators that decide, across all tasks, which rows to keep.

A dedup operator runs in two steps. Inside every task of a stage, :meth:`DedupOp.keys`
turns each batch into arrays (hashes, signatures, ...), which the pipeline stores per
task. Once every task of the stage is done, :meth:`DedupOp.decide` runs once on the
driver and returns, per task, a keep-mask over the rows the task produced (input order).

An operator knows nothing of where it runs. What it needs to run distributed work is in
the :class:`DedupContext` the pipeline hands it:

- ``ctx.keys.load(task, names)`` reads a task's arrays (picklable: may go into tasks);
- ``ctx.scratch.save(name, array)`` / ``load(name)`` keep intermediate arrays under the
  stage's own scratch space (picklable: may go into tasks);
- ``ctx.map(fn, items, desc)`` runs ``fn`` over ``items`` on the pipeline's backend
  (driver only; ``fn`` and ``items`` must pickle);
- ``ctx.write_audit(table)`` stores the stage's audit table under the stage's own name.

Subclasses are frozen dataclasses whose fields are the operator's parameters, checked
once in ``__post_init__`` (raise :class:`~shardwise.errors.ConfigError`).
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import pyarrow as pa

__all__ = ["DedupContext", "DedupDecision", "DedupOp", "Mapper", "Scratch", "TaskKeys"]

T = TypeVar("T")
R = TypeVar("R")


class TaskKeys(Protocol):
    """The arrays :meth:`DedupOp.keys` returned, per task (concatenated over batches)."""

    def load(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Task ``task``'s arrays (only ``names`` when given; absent names are left out)."""
        ...


class Scratch(Protocol):
    """Intermediate arrays of one dedup stage, visible to every task of the run."""

    def save(self, name: str, array: np.ndarray) -> None:
        """Store ``array`` as ``name`` (a relative path such as ``"edges/p00001.npy"``)."""
        ...

    def load(self, name: str) -> np.ndarray:
        """The array stored as ``name``."""
        ...


class Mapper(Protocol):
    """Runs ``fn`` over ``items`` on the pipeline's backend, results in item order."""

    def __call__(self, fn: Callable[[T], R], items: Sequence[T], desc: str) -> list[R]: ...


@dataclass(frozen=True)
class DedupContext:
    """What a dedup operator's :meth:`~DedupOp.decide` gets from the pipeline.

    Attributes:
        name: the stage's name, unique in its pipeline (``minhash_dedup``,
            ``minhash_dedup#2``, ...); audit outputs are named after it.
        num_tasks: tasks of the stage; masks are returned for each.
        keys: per-task arrays from :meth:`DedupOp.keys`.
        scratch: the stage's scratch space.
        map: the backend's map.
        write_audit: stores an audit table for this stage and returns where it went.
    """

    name: str
    num_tasks: int
    keys: TaskKeys
    scratch: Scratch
    map: Mapper
    write_audit: Callable[[pa.Table], str] = field(repr=False)


@dataclass(frozen=True)
class DedupDecision:
    """The result of :meth:`DedupOp.decide`.

    Attributes:
        masks: per task, a boolean keep-mask over the rows the task produced.
        summary: plain numbers for the run's manifest (``removed`` at least).
    """

    masks: list[np.ndarray]
    summary: dict[str, Any]


class DedupOp(abc.ABC):
    """Base class of dedup operators (see the module docstring).

    ``work_per_byte`` is the CPU work of :meth:`keys` per input byte relative to reading
    and writing the rows (1.0). The pipeline sizes its tasks by work, so a CPU-heavy
    dedup on a small input still gets enough tasks to keep every core busy; tasks stay
    defined by the data and the operators alone (the same on every backend).
    """

    work_per_byte: ClassVar[float] = 1.0

    @abc.abstractmethod
    def keys(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        """Arrays describing the rows of ``batch`` (one entry per row along axis 0)."""

    @abc.abstractmethod
    def decide(self, ctx: DedupContext) -> DedupDecision:
        """Per task, which rows to keep, from every task's keys."""
