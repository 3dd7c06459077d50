"""Run a pipeline: its stages' tasks on a parallel backend, dedup decisions between
stages, and the output published as a whole (see :mod:`shardwise.pipeline.commit`).

Stage ``k`` of task ``t`` reads its input (source pieces for the first stage, the
previous stage's intermediate rows otherwise), applies the keep-mask of the dedup that
starts the stage, runs the stage's operators, and either keeps its rows and the dedup's
keys (when a dedup ends the stage) or writes the output shards. Between stages the
dedup decides, over all tasks in input order, which rows to keep.
"""

from __future__ import annotations

import io
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.formats import OnError
from shardwise.index import MANIFEST_NAME, DatasetIndex
from shardwise.ops.operators import Op
from shardwise.parallel import BackendSpec, active_backend
from shardwise.parallel._registry import known_backends
from shardwise.pipeline.commit import Layout, fingerprint
from shardwise.pipeline.dedup_services import audit_examples, dedup_context
from shardwise.pipeline.execution import Execution
from shardwise.pipeline.ledger import Ledger
from shardwise.pipeline.run_task import Job, run_job
from shardwise.pipeline.sink import Sink
from shardwise.pipeline.stages import Stage, plan_stages, work_per_byte
from shardwise.pipeline.task_split import Piece
from shardwise.storage import atomic_write, join

__all__ = ["RunResult", "Sink", "run_pipeline"]

MANIFEST_VERSION = 2
#: estimated work (input bytes x the heaviest operator's work per byte) up to which a run on
#: the local pool runs its tasks in the driver: serially, that much work takes about as
#: long (~0.5 s) as starting the pool's worker interpreters and their imports
IN_DRIVER_WORK = 32 * 2**20
#: estimated work up to which such a run takes the calling process as one of the pool's
#: slots (one worker interpreter fewer to start); above, a worker's start is too small a
#: share of the run to matter, and the driver stays out of the work
CALLER_SLOT_WORK = 2**30


@dataclass
class RunResult:
    """Totals of a run and where its manifest is.

    Attributes:
        rows_in: records read (bad ones included).
        rows_out: rows written.
        dropped: ``{operator: {reason: rows}}``.
        quarantined: bad records skipped under ``on_error="skip"``.
        files: output files (relative to the output directory).
        tasks: number of tasks; each runs once per stage (``stages``: a stage ends where
            a dedup decides), and ``skipped_tasks`` of those ``tasks * stages`` runs were
            already committed by an earlier, interrupted run (all of them when the output
            was complete).
        manifest: path of ``_manifest.json``.
        quarantine_examples: up to 20 ``[file, place, reason]`` of quarantined records.
        tokens_in: token ids made by ``tokenize`` (0 without it).
        tokens_out: token ids written.
    """

    rows_in: int
    rows_out: int
    dropped: dict[str, dict[str, int]]
    quarantined: int
    files: list[dict[str, Any]]
    tasks: int
    skipped_tasks: int
    manifest: str
    quarantine_examples: list[list[str]] = field(default_factory=list)
    tokens_in: int = 0
    tokens_out: int = 0
    stages: int = 1

    @property
    def ledger(self) -> Ledger:
        return Ledger(
            self.rows_in,
            self.rows_out,
            self.dropped,
            self.quarantined,
            self.quarantine_examples,
            self.tokens_in,
            self.tokens_out,
        )

    def table(self) -> str:
        """The accounting as a plain-text table."""
        return self.ledger.table(files=len(self.files))

    @classmethod
    def from_manifest(cls, m: dict[str, Any], path: str, skipped: int) -> RunResult:
        return cls(
            m["rows_in"],
            m["rows_out"],
            _in_pipeline_order(m["dropped"], [o.get("op") for o in m.get("operators", [])]),
            m["quarantined"],
            m["files"],
            m["tasks"],
            skipped,
            path,
            m["quarantine_examples"],
            int(m.get("tokens_in", 0)),
            int(m.get("tokens_out", 0)),
            max(1, len(m.get("stages", []))),
        )


def _in_pipeline_order(
    dropped: dict[str, dict[str, int]], names: list[Any]
) -> dict[str, dict[str, int]]:
    """The drops by operator in the pipeline's order, reasons sorted: the same for a run
    (whose tasks' drops add up in the order they come) and for a rerun of a complete one
    (read back from its manifest, whose keys are sorted)."""
    rank = {name: i for i, name in reversed(list(enumerate(names)))}
    ops = sorted(dropped, key=lambda op: (rank.get(op, len(names)), op))
    return {op: dict(sorted(dropped[op].items())) for op in ops}


def run_pipeline(
    index: DatasetIndex,
    ops: Sequence[Op],
    sink: Sink,
    tasks: Sequence[Sequence[Piece]],
    *,
    backend: BackendSpec = None,
    num_proc: int | None = None,
    on_error: OnError = "raise",
    columns: Sequence[str] | None = None,
    progress: bool = True,
) -> RunResult:
    """Run ``ops`` over ``tasks`` of ``index`` into ``sink`` (see the module docstring)."""
    if isinstance(backend, str) and backend not in known_backends():  # also when all is done
        raise ConfigError(
            f"unknown backend {backend!r}; known backends: {', '.join(known_backends())}"
        )
    layout = Layout.of(sink)
    fp = fingerprint(index, ops, sink, tasks)
    manifest_path = join(layout.final, MANIFEST_NAME)
    done = layout.committed(fp)
    if done is not None:  # already complete: nothing to redo
        return RunResult.from_manifest(
            done, manifest_path, done["tasks"] * max(1, len(done.get("stages", [])))
        )
    run = Execution(_backend_for(backend, index, ops), num_proc, progress)
    run.check_picklable(ops)  # before anything is staged or dispatched
    layout.begin(fp)
    stages = plan_stages(ops)
    started = time.time()
    cols = tuple(columns) if columns else None
    results, summaries, timings, skipped = _run_stages(
        stages, tasks, index, sink, layout, run, on_error, cols
    )
    manifest = _manifest(sorted(results, key=lambda r: r["task"]), ops, summaries, fp, len(tasks))
    manifest.update(
        {"started": started, "seconds": round(time.time() - started, 6), "stages": timings}
    )
    layout.publish(manifest)
    if manifest["files"]:
        from shardwise.index import index_dataset

        index_dataset(
            layout.final, format=sink.format, progress=False, storage_options=sink.storage_options
        )
    return RunResult.from_manifest(manifest, manifest_path, skipped)


def _run_stages(
    stages: Sequence[Stage],
    tasks: Sequence[Sequence[Piece]],
    index: DatasetIndex,
    sink: Sink,
    layout: Layout,
    run: Execution,
    on_error: OnError,
    columns: tuple[str, ...] | None,
) -> tuple[list[dict[str, Any]], dict[str, Any], list[dict[str, Any]], int]:
    """Every stage's tasks on the backend, each dedup decided between its stages:
    ``(the last stage's results, the dedup summaries, the stages' timings, tasks skipped)``."""
    summaries: dict[str, Any] = {}
    timings: list[dict[str, Any]] = []
    skipped = 0
    results: list[dict[str, Any]] = []
    for stage in stages:
        if stage.index > 0:
            summaries[stage.after] = _decide(layout, stages[stage.index - 1], len(tasks), run)
            timings[-1]["decide_seconds"] = summaries[stage.after]["seconds"]
        jobs = [
            Job(
                t,
                stage,
                tuple(p),
                index,
                sink,
                layout,
                on_error,
                columns,
            )
            for t, p in enumerate(tasks)
        ]
        desc = f"stage {stage.index + 1}/{len(stages)}" if len(stages) > 1 else "tasks"
        t0 = time.time()
        results = run.map(run_job, jobs, desc)
        timings.append(
            {
                "stage": stage.index,
                "operators": [*stage.names, *([stage.dedup_name] if stage.dedup else [])],
                "seconds": round(time.time() - t0, 6),
            }
        )
        skipped += sum(1 for r in results if r.get("skipped"))
    return results, summaries, timings, skipped


def _backend_for(backend: BackendSpec, index: DatasetIndex, ops: Sequence[Op]) -> BackendSpec:
    """``backend``, except on the local pool (``backend`` None or ``"local"``, no
    :func:`~shardwise.parallel_backend` block) when every operator is shardwise's own: a
    small input (:data:`IN_DRIVER_WORK`) runs in the driver, as a pool could not pay for
    its start, and a mid-sized one (:data:`CALLER_SLOT_WORK`) on a pool with the driver as
    one of its slots (:func:`~shardwise.parallel.backends.local.caller_pool`). User functions keep
    the pool (a crash in one is a worker's, and retried). The tasks are the same, so is
    the output."""
    if backend not in (None, "local") or (backend is None and active_backend() is not None):
        return backend
    if not all(
        str(getattr(getattr(op.fn, "fn", op.fn), "__module__", "")).startswith("shardwise.")
        for op in ops
    ):
        return backend
    work = index.num_bytes * work_per_byte(ops)
    if work <= IN_DRIVER_WORK:
        return "sequential"
    if work > CALLER_SLOT_WORK:
        return backend
    # imported here: a worker process that imports the pipeline never needs the pool
    from shardwise.parallel.backends.local import caller_pool

    return caller_pool()


def _decide(layout: Layout, stage: Stage, num_tasks: int, run: Execution) -> dict[str, Any]:
    """The dedup ending ``stage`` decides; its keep-masks start the next stage. Its summary
    gets the time it took and a few examples of what it removed."""
    if stage.dedup is None:
        raise AssertionError("only a stage ending with a dedup has a decision")
    t0 = time.time()
    ctx = dedup_context(layout, stage.index, stage.dedup_name, num_tasks, run)
    decision = stage.dedup.dedup.decide(ctx)
    for t, keep in enumerate(decision.masks):
        buf = io.BytesIO()
        np.save(buf, np.asarray(keep, dtype=bool))
        # recomputed by every run before the next stage starts: no fsync (durable=False)
        with atomic_write(
            layout.stage_file(stage.index + 1, t, "keep.npy"),
            durable=False,
            **layout.storage_options,
        ) as f:
            f.write(buf.getvalue())
    column = getattr(stage.dedup.dedup, "column", None)
    examples = audit_examples(
        layout, stage.index, stage.dedup_name, column if isinstance(column, str) else None
    )
    return {**decision.summary, "examples": examples, "seconds": round(time.time() - t0, 6)}


def _manifest(
    final: list[dict[str, Any]], ops: Sequence[Op], summaries: dict[str, Any], fp: str, tasks: int
) -> dict[str, Any]:
    """The run's manifest from each task's last-stage result (cumulative per task)."""
    total = Ledger.total(Ledger.from_json(r) for r in final)
    files = [f for r in final for f in r["files"]]
    return {
        "version": MANIFEST_VERSION,
        "fingerprint": fp,
        "files": files,
        **total.to_json(),
        "tasks": tasks,
        "task_seconds": [r.get("seconds", 0.0) for r in final],
        "operators": [op.describe() for op in ops],
        "dedup": summaries,
    }
