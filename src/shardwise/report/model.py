"""What a run report shows, read from a published run's manifests (plain numbers only).

The run's ``_manifest.json`` gives the ledger, the files, the stages' times and each
dedup's summary; ``_manifests/task-NNNNN.json`` give each task's times; a dedup's audit
table (``_dedup_<stage>.parquet``) gives its cluster sizes. :meth:`RunReport.to_json`
holds the same numbers as those files, and :meth:`RunReport.from_json` reads them back.
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow.parquet as pq

from shardwise.errors import FormatError, StorageError
from shardwise.index import MANIFEST_NAME
from shardwise.storage import join, open_input, resolve

__all__ = ["DedupStage", "RunReport", "TaskTime", "load_run"]


@dataclass(frozen=True)
class TaskTime:
    """One task: when it started (epoch seconds), how long each stage took, its rows.

    Attributes:
        task: task number.
        rows_in: records the task read.
        rows_out: rows it wrote.
        stages: per stage ``{"stage", "started", "seconds"}`` (the last stage only for
            manifests written before stage times were kept).
    """

    task: int
    rows_in: int
    rows_out: int
    stages: list[dict[str, float]]

    @property
    def started(self) -> float:
        return min((s["started"] for s in self.stages), default=0.0)

    @property
    def read(self) -> float:
        """When the task's first stage (the one reading its input) finished."""
        first = min(self.stages, key=lambda s: s["stage"], default=None)
        return first["started"] + first["seconds"] if first else 0.0

    @property
    def finished(self) -> float:
        return max((s["started"] + s["seconds"] for s in self.stages), default=0.0)


@dataclass(frozen=True)
class DedupStage:
    """One dedup stage: its manifest summary, cluster sizes and examples.

    Attributes:
        name: the stage's name (``exact_dedup``, ``minhash_dedup#2``, ...).
        summary: the manifest's numbers for it (method, removed, clusters, seconds...).
        cluster_sizes: ``{size: clusters}`` from the audit table (kept row included).
        examples: a few clusters, each ``{"kept": {...}, "removed": [...], "cluster_size"}``.
    """

    name: str
    summary: dict[str, Any]
    cluster_sizes: dict[int, int]
    examples: list[dict[str, Any]]


@dataclass(frozen=True)
class RunReport:
    """Everything a run report shows (see the module docstring)."""

    output: str
    rows_in: int
    rows_out: int
    dropped: dict[str, dict[str, int]]
    quarantined: int
    quarantine_examples: list[list[str]]
    files: list[dict[str, Any]]
    operators: list[dict[str, Any]]
    stages: list[dict[str, Any]]
    tasks: list[TaskTime]
    dedup: list[DedupStage]
    started: float = 0.0
    seconds: float = 0.0
    manifest: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def dropped_total(self) -> int:
        return sum(sum(r.values()) for r in self.dropped.values())

    def throughput(self, points: int = 50) -> list[list[float]]:
        """``[seconds since the first task started, input rows read]``: a task's rows count
        once its first stage (which reads them) has finished."""
        if not self.tasks:
            return []
        t0 = min(t.started for t in self.tasks)
        ends = np.array([t.read - t0 for t in self.tasks])
        rows = np.array([t.rows_in for t in self.tasks], dtype=np.int64)
        order = np.argsort(ends, kind="stable")
        done = np.cumsum(rows[order])
        grid = np.linspace(0.0, float(ends.max()), min(points, len(ends) + 1))
        idx = np.searchsorted(ends[order], grid, side="right")
        return [[round(float(g), 6), int(done[i - 1]) if i else 0] for g, i in zip(grid, idx)]

    def to_json(self) -> dict[str, Any]:
        """The report's numbers as plain JSON (the same as the manifests')."""
        out = {k: v for k, v in asdict(self).items() if k != "manifest"}
        for d in out["dedup"]:
            d["cluster_sizes"] = {str(k): v for k, v in d["cluster_sizes"].items()}
        out["unaccounted"] = self.rows_in - self.rows_out - self.dropped_total - self.quarantined
        out["throughput"] = self.throughput()
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunReport:
        """The report whose :meth:`to_json` gave ``data``."""
        plain = {k: v for k, v in data.items() if k not in ("unaccounted", "throughput")}
        plain["tasks"] = [TaskTime(**t) for t in data["tasks"]]
        plain["dedup"] = [
            DedupStage(
                d["name"],
                d["summary"],
                {int(k): v for k, v in d["cluster_sizes"].items()},
                d["examples"],
            )
            for d in data["dedup"]
        ]
        return cls(**plain)


def _read_json(url: str, storage_options: dict[str, Any]) -> Any:
    with open_input(url, **storage_options) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError as e:
        raise FormatError(f"unreadable manifest ({e})", url) from e


def _task(data: dict[str, Any]) -> TaskTime:
    stages = data.get("stages") or [
        {
            "stage": data.get("stage", 0),
            "started": data.get("started", 0.0),
            "seconds": data.get("seconds", 0.0),
        }
    ]
    return TaskTime(
        int(data["task"]),
        int(data["rows_in"]),
        int(data["rows_out"]),
        [{k: float(v) if k != "stage" else int(v) for k, v in s.items()} for s in stages],
    )


def _cluster_sizes(
    run_dir: str, summary: dict[str, Any], storage_options: dict[str, Any]
) -> dict[int, int]:
    """``{cluster size: clusters}`` from the stage's audit table (next to the manifest)."""
    audit = summary.get("audit")
    if not audit:
        return {}
    path = join(run_dir, str(audit).rstrip("/").rsplit("/", 1)[-1])
    with open_input(path, **storage_options) as f:
        # on this thread only (no pre-buffering on the I/O pool either): pyarrow's thread
        # pools, still winding down when a short process (`shardwise report`) exits, could
        # abort it there ("terminate called without an active exception")
        table = pq.ParquetFile(io.BytesIO(f.read()), pre_buffer=False).read(use_threads=False)
    if table.num_rows == 0 or not {"kept_task", "kept_row"} <= set(table.column_names):
        return {}  # empty, or a custom operator's own audit
    kept = np.stack([table["kept_task"].to_numpy(), table["kept_row"].to_numpy()], axis=1)
    sizes, counts = np.unique(
        np.unique(kept, axis=0, return_counts=True)[1] + 1, return_counts=True
    )
    return {int(s): int(c) for s, c in zip(sizes, counts)}


def load_run(run_dir: str, storage_options: dict[str, Any] | None = None) -> RunReport:
    """The report of the run published in ``run_dir`` (a local path or URL).

    Raises:
        StorageError: ``run_dir`` holds no run manifest.
        FormatError: a damaged manifest, naming it.
    """
    opts = dict(storage_options or {})
    run_dir = run_dir.rstrip("/") or "/"
    manifest_path = join(run_dir, MANIFEST_NAME)
    fs, local = resolve(manifest_path, **opts)
    if not fs.exists(local):
        raise StorageError(
            f"{run_dir}: no {MANIFEST_NAME} here; give the output directory of a finished run"
        )
    m = _read_json(manifest_path, opts)
    try:
        return _report(run_dir, m, opts)
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as e:
        if isinstance(e, FormatError):
            raise
        raise FormatError(f"not a run manifest ({type(e).__name__}: {e})", manifest_path) from e


def _report(run_dir: str, m: Any, opts: dict[str, Any]) -> RunReport:
    tasks = _tasks(run_dir, m, opts)
    dedup = _dedup_stages(run_dir, m, opts)
    return RunReport(
        run_dir,
        int(m["rows_in"]),
        int(m["rows_out"]),
        m["dropped"],
        int(m["quarantined"]),
        m.get("quarantine_examples", []),
        m["files"],
        m.get("operators", []),
        m.get("stages", []),
        tasks,
        dedup,
        float(m.get("started", 0.0)),
        float(m.get("seconds", 0.0)),
        manifest=m,
    )


def _tasks(run_dir: str, m: dict[str, Any], opts: dict[str, Any]) -> list[TaskTime]:
    """The run's tasks, from their manifests."""
    return [
        _task(_read_json(join(run_dir, "_manifests", f"task-{t:05d}.json"), opts))
        for t in range(int(m["tasks"]))
    ]


def _dedup_stages(run_dir: str, m: dict[str, Any], opts: dict[str, Any]) -> list[DedupStage]:
    """The run's dedup stages: summary, cluster sizes and examples of each."""
    return [
        DedupStage(
            name,
            {k: v for k, v in s.items() if k != "examples"},
            _cluster_sizes(run_dir, s, opts),
            list(s.get("examples", [])),
        )
        for name, s in m.get("dedup", {}).items()
    ]
