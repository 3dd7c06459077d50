"""What the pipeline hands a dedup operator: task keys, scratch space, the backend's map
and the audit writer (see :mod:`shardwise.ops.dedup`)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

from shardwise.ops.dedup import DedupContext
from shardwise.pipeline._npyload import HEADERS, load_npy
from shardwise.pipeline._npzmap import map_npz
from shardwise.pipeline.commit import Layout
from shardwise.pipeline.execution import Execution
from shardwise.storage import atomic_write, join, open_arrow_input, open_input, resolve

__all__ = ["StorageScratch", "TaskKeyFiles", "audit_examples", "dedup_context"]


@dataclass(frozen=True)
class TaskKeyFiles:
    """Per task, the ``.npz`` of what the operator's ``keys`` returned."""

    paths: tuple[str, ...]
    storage_options: dict[str, Any]

    def load(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Task ``task``'s arrays; members are read from the file as needed. On local
        disk they are read-only maps of the file: only the rows a caller indexes are read."""
        fs, local = resolve(self.paths[task], **self.storage_options)
        if "file" in _protocols(fs):
            mapped = map_npz(local, names)
            if mapped is not None:
                return mapped
        with open_input(self.paths[task], **self.storage_options) as f, HEADERS:
            data = np.load(f)  # its members' headers are parsed as they are read, below
            wanted = data.files if names is None else [n for n in names if n in data.files]
            return {k: data[k] for k in wanted}


def _protocols(fs: Any) -> tuple[str, ...]:
    proto = fs.protocol
    return (proto,) if isinstance(proto, str) else tuple(proto)


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
            return load_npy(f.read())


def dedup_context(
    layout: Layout, stage: int, name: str, num_tasks: int, run: Execution
) -> DedupContext:
    """The context of the dedup that ends stage ``stage`` (named ``name``)."""
    opts = layout.storage_options

    def write_audit(table: pa.Table) -> str:
        path = _audit_path(layout, name)
        buf = io.BytesIO()
        pq.write_table(table, buf)
        with atomic_write(path, **opts) as f:
            f.write(buf.getvalue())
        return join(layout.final, layout.relative(path))  # where it is once published

    keys = TaskKeyFiles(
        tuple(layout.stage_file(stage, t, "keys.npz") for t in range(num_tasks)), opts
    )
    return DedupContext(
        name,
        num_tasks,
        keys,
        StorageScratch(layout.work(f"d{stage + 1}"), opts),
        run.map,
        write_audit,
    )


def _safe(name: str) -> str:
    return name.replace("#", "-")


def _audit_path(layout: Layout, name: str) -> str:
    return join(layout.root, f"_dedup_{_safe(name)}.parquet")


EXAMPLE_CHARS = 400
AUDIT_COLUMNS = ("removed_task", "removed_row", "kept_task", "kept_row")


def audit_examples(
    layout: Layout, stage: int, name: str, column: str | None, clusters: int = 4, removed: int = 3
) -> list[dict[str, Any]]:
    """The ``column`` of the kept row and a few removed rows of the largest duplicate
    clusters, from the audit table of the dedup ending ``stage`` (when it has the built-in
    operators' :data:`AUDIT_COLUMNS`) and the stage's rows (read before they are
    discarded). Texts are cut to :data:`EXAMPLE_CHARS` characters."""
    opts = layout.storage_options
    path = _audit_path(layout, name)
    fs, local = resolve(path, **opts)
    if column is None or not fs.exists(local):
        return []
    with open_input(path, **opts) as f:
        audit = pq.ParquetFile(io.BytesIO(f.read()), pre_buffer=False).read(
            use_threads=False
        )  # see report.model
    if not set(AUDIT_COLUMNS) <= set(audit.column_names):  # a custom operator's own audit
        return []
    kept = np.stack([audit["kept_task"].to_numpy(), audit["kept_row"].to_numpy()], axis=1)
    gone = np.stack([audit["removed_task"].to_numpy(), audit["removed_row"].to_numpy()], axis=1)
    groups, first, counts = np.unique(kept, axis=0, return_index=True, return_counts=True)
    rows = []
    for g in np.lexsort((first, -counts))[:clusters]:  # largest first, then first seen
        mine = gone[(kept == groups[g]).all(axis=1)][:removed]
        rows.append(
            (
                (int(groups[g][0]), int(groups[g][1])),
                [(int(t), int(r)) for t, r in mine],
                int(counts[g]),
            )
        )
    texts = _stage_values(layout, stage, column, {p for r in rows for p in [r[0], *r[1]]})
    return [
        {
            "kept": {"task": k[0], "row": k[1], "text": texts.get(k, "")},
            "cluster_size": n + 1,
            "removed": [{"task": t, "row": r, "text": texts.get((t, r), "")} for t, r in gone],
        }
        for k, gone, n in rows
    ]


def _stage_values(
    layout: Layout, stage: int, column: str, wanted: set[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    """``column`` of the stage's rows ``(task, row)`` in ``wanted``, as short text."""
    out: dict[tuple[int, int], str] = {}
    for task in sorted({t for t, _ in wanted}):
        # mapped where local: only the pages of the few rows wanted are read
        with open_arrow_input(
            layout.stage_file(stage, task, "arrow"), **layout.storage_options
        ) as f:
            table = ipc.open_file(f).read_all()
        if column not in table.column_names:
            continue
        values = table[column]
        for t, r in wanted:
            if t == task and r < len(values):
                v = values[r].as_py()
                text = v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                out[(t, r)] = text[:EXAMPLE_CHARS]
    return out
