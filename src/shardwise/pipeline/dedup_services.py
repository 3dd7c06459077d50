"""What the pipeline hands a dedup operator: task keys, scratch space, the backend's map
and the audit writer (see :mod:`shardwise.ops.dedup`)."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.ops.dedup import DedupContext
from shardwise.parallel import BackendSpec, parallel_map
from shardwise.pipeline.commit import Layout
from shardwise.storage import atomic_write, join, open_input

__all__ = ["Execution", "StorageScratch", "TaskKeyFiles", "dedup_context"]

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
        return parallel_map(fn, items, backend=self.backend, num_proc=self.num_proc, desc=desc,
                            progress=self.progress, chunksize=1)


@dataclass(frozen=True)
class TaskKeyFiles:
    """Per task, the ``.npz`` of what the operator's ``keys`` returned."""

    paths: tuple[str, ...]
    storage_options: dict[str, Any]

    def load(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Task ``task``'s arrays; members are read from the file as needed."""
        with open_input(self.paths[task], **self.storage_options) as f:
            data = np.load(f)
            wanted = data.files if names is None else [n for n in names if n in data.files]
            return {k: data[k] for k in wanted}


@dataclass(frozen=True)
class StorageScratch:
    """Scratch arrays under ``root`` (recomputed on every run: written without fsync)."""

    root: str
    storage_options: dict[str, Any]

    def save(self, name: str, array: np.ndarray) -> None:
        buf = io.BytesIO()
        np.save(buf, array)
        with atomic_write(join(self.root, name), durable=False, **self.storage_options) as f:
            f.write(buf.getvalue())

    def load(self, name: str) -> np.ndarray:
        with open_input(join(self.root, name), **self.storage_options) as f:
            return np.load(io.BytesIO(f.read()))


def dedup_context(layout: Layout, stage: int, name: str, num_tasks: int,
                  run: Execution) -> DedupContext:
    """The context of the dedup that ends stage ``stage`` (named ``name``)."""
    opts = layout.storage_options

    def write_audit(table: pa.Table) -> str:
        path = join(layout.root, f"_dedup_{_safe(name)}.parquet")
        buf = io.BytesIO()
        pq.write_table(table, buf)
        with atomic_write(path, **opts) as f:
            f.write(buf.getvalue())
        return join(layout.final, layout.relative(path))  # where it is once published

    keys = TaskKeyFiles(tuple(layout.stage_file(stage, t, "keys.npz") for t in range(num_tasks)), opts)
    return DedupContext(name, num_tasks, keys, StorageScratch(layout.work(f"d{stage + 1}"), opts), run.map,
                        write_audit)


def _safe(name: str) -> str:
    return name.replace("#", "-")
