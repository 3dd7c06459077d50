"""Run a pipeline: staged tasks on a parallel backend, atomic commits, manifests, accounting.

The operator chain is cut into *stages* at every dedup operator. Stage ``k`` of task ``t``
reads its input (source pieces for the first stage, the previous stage's intermediate
file otherwise), applies the keep-mask of the dedup that starts the stage, runs the
stage's operators, and either writes an intermediate Arrow file plus the dedup keys
(when another dedup follows) or the final output shards. Between stages the driver
decides, over all tasks in input order, which rows are first occurrences.

Commit protocol (everything below ``out/``):

- every file is written under a temporary name and renamed (or copied) when complete;
- a task's manifest (``_manifests/task-NNNNN.json``: rows in/out, drops per operator and
  reason, quarantined rows, files with bytes and xxh64) is written after its files;
- the driver writes ``_manifest.json`` (all files, totals) and then the dataset index.

A rerun skips every task whose manifest exists, so after a crash only unfinished work
is redone, and because every step is deterministic the output is byte-identical to a
clean run, on every backend.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardwise.errors import ConfigError
from shardwise.formats import Quarantine, get_format
from shardwise.index import MANIFEST_NAME, DatasetIndex
from shardwise.ops.base import Op
from shardwise.pipeline.tasks import Piece
from shardwise.storage import atomic_write, join, open_input, resolve

__all__ = ["DedupContext", "RunResult", "Sink", "run_pipeline"]

WORK = "_work"
MANIFESTS = "_manifests"


@dataclass(frozen=True)
class Sink:
    """Where results go: ``format`` shards of about ``target_shard_bytes`` under ``path``."""

    path: str
    format: str = "parquet"
    target_shard_bytes: int = 128 * 2**20
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunResult:
    """Totals of a run and where its manifest is.

    Attributes:
        rows_in: records read (bad ones included).
        rows_out: rows written.
        dropped: ``{operator: {reason: rows}}``.
        quarantined: bad records skipped under ``on_error="skip"``.
        files: output files (relative to the output directory).
        tasks: number of tasks; ``skipped_tasks`` were already committed.
        manifest: path of ``_manifest.json``.
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

    def table(self) -> str:
        """The accounting as a plain-text table."""
        lines = [f"{'rows in':<40}{self.rows_in:>14,}"]
        for op, reasons in self.dropped.items():
            for reason, n in reasons.items():
                lines.append(f"{'  dropped ' + op + ': ' + reason:<40.40}{n:>14,}")
        lines.append(f"{'  quarantined (bad records)':<40}{self.quarantined:>14,}")
        lines.append(f"{'rows out':<40}{self.rows_out:>14,}")
        balance = self.rows_in - self.rows_out - self.quarantined - sum(sum(r.values()) for r in self.dropped.values())
        lines.append(f"{'unaccounted (must be 0)':<40}{balance:>14,}")
        lines.append(f"{'files':<40}{len(self.files):>14,}")
        return "\n".join(lines)


@dataclass(frozen=True)
class DedupContext:
    """What a dedup operator's ``decide`` step gets from the pipeline.

    Attributes:
        key_files: per task, the ``.npz`` of what the operator's function returned.
        work_dir: a directory for the operator's own intermediate files.
        params: the operator's arguments.
        backend, num_proc, progress: how to run its parallel stages.
        storage_options: fsspec options of the output location.
        out: the pipeline's output directory (for audit tables).
    """

    key_files: list[str]
    work_dir: str
    params: dict[str, Any]
    backend: Any
    num_proc: int | None
    storage_options: dict[str, Any]
    progress: bool
    out: str

    def load(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Task ``task``'s arrays (only ``names``, when given; absent names are left out).
        Members are read from the file as needed, not the whole file."""
        with open_input(self.key_files[task], **self.storage_options) as f:
            data = np.load(f)
            return {k: data[k] for k in (data.files if names is None else [n for n in names if n in data.files])}


@dataclass(frozen=True)
class _Job:
    task: int
    stage: int
    pieces: tuple[Piece, ...]
    index: DatasetIndex
    ops: tuple[Op, ...]
    dedup: Op | None  # the dedup that ends this stage (None: last stage)
    starts_with_dedup: str  # name of the dedup whose mask starts this stage ("" for stage 0)
    sink: Sink
    on_error: str
    columns: tuple[str, ...] | None


def _op_names(ops: Sequence[Op]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for op in ops:
        seen[op.name] = seen.get(op.name, 0) + 1
        out.append(op.name if seen[op.name] == 1 else f"{op.name}#{seen[op.name]}")
    return out


def _work_path(sink: Sink, stage: int, task: int, ext: str) -> str:
    return join(sink.path, WORK, f"s{stage}", f"task-{task:05d}.{ext}")


def _exists(url: str, storage_options: dict[str, Any]) -> bool:
    fs, path = resolve(url, **storage_options)
    return bool(fs.exists(path))


def _read_json(url: str, storage_options: dict[str, Any]) -> Any:
    with open_input(url, **storage_options) as f:
        return json.loads(f.read())


def _source_batches(job: _Job, q: Quarantine) -> Iterator[pa.RecordBatch]:
    fmt = get_format(job.index.format, storage_options=job.index.storage_options)
    for piece in job.pieces:
        unit = job.index.units[piece.unit]
        cols = list(job.columns) if job.columns else None
        if piece.hi < 0:
            for batch in fmt.read_unit(unit, columns=cols, on_error=job.on_error, quarantine=q, schema=job.index.schema):  # type: ignore[arg-type]
                yield batch
            continue
        seen = 0
        for batch in fmt.read_unit(unit, columns=cols, on_error=job.on_error, quarantine=q, schema=job.index.schema):  # type: ignore[arg-type]
            a, b = max(piece.lo - seen, 0), min(piece.hi - seen, batch.num_rows)
            if b > a:
                yield batch.slice(a, b - a)
            seen += batch.num_rows
            if seen >= piece.hi:
                break


def _stage_input(job: _Job, q: Quarantine) -> tuple[Iterator[pa.RecordBatch], np.ndarray | None]:
    if job.stage == 0:
        return _source_batches(job, q), None
    opts = job.sink.options.get("storage_options", {})
    with open_input(_work_path(job.sink, job.stage - 1, job.task, "arrow"), **opts) as f:
        table = ipc.open_file(pa.BufferReader(f.read())).read_all()
    with open_input(_work_path(job.sink, job.stage, job.task, "keep.npy"), **opts) as f:
        keep = np.load(io.BytesIO(f.read()))
    return iter(table.to_batches()), keep


def _run_job(job: _Job) -> dict[str, Any]:
    """One stage of one task; returns its accounting (and commits its outputs)."""
    opts = job.sink.options.get("storage_options", {})
    marker = _work_path(job.sink, job.stage, job.task, "done.json") if job.dedup is not None else join(
        job.sink.path, MANIFESTS, f"task-{job.task:05d}.json")
    if _exists(marker, opts):
        return {**_read_json(marker, opts), "skipped": True}
    q = Quarantine()
    names = _op_names(job.ops)
    dropped: dict[str, dict[str, int]] = {}
    rows_in = sum(job.index.units[p.unit].num_samples if p.hi < 0 else p.hi - p.lo for p in job.pieces)
    examples: list[list[str]] = []
    if job.stage > 0:  # carry the task's accounting from the earlier stages
        before = _read_json(_work_path(job.sink, job.stage - 1, job.task, "done.json"), opts)
        _merge(dropped, before["dropped"])
        q.count, examples = before["quarantined"], before["quarantine_examples"]
    batches, keep = _stage_input(job, q)
    out_batches: list[pa.RecordBatch] = []
    keys: list[dict[str, np.ndarray]] = []
    writer = None
    if job.dedup is None:
        sink_opts = {k: v for k, v in job.sink.options.items() if k != "storage_options"}
        writer = get_format(job.sink.format, storage_options=opts).open_writer(
            join(job.sink.path, f"part-{job.task:05d}"), target_shard_bytes=job.sink.target_shard_bytes,
            **sink_opts)
    offset = 0
    for batch in batches:
        if keep is not None:
            m = keep[offset : offset + batch.num_rows]
            offset += batch.num_rows
            gone = int((~m).sum())
            if gone:
                dropped.setdefault(job.starts_with_dedup, {}).setdefault("duplicate", 0)
                dropped[job.starts_with_dedup]["duplicate"] += gone
                batch = batch.filter(pa.array(m))
        for name, op in zip(names, job.ops):
            if batch.num_rows == 0:
                break
            if op.kind == "map":
                batch = op.map(batch)
            else:
                mask, reason = op.mask(batch)
                gone = batch.num_rows - int(pa.compute.sum(mask).as_py() or 0)
                if gone:
                    dropped.setdefault(name, {}).setdefault(reason, 0)
                    dropped[name][reason] += gone
                    batch = batch.filter(mask)
        if job.dedup is not None:
            out_batches.append(batch)
            if batch.num_rows:
                keys.append(job.dedup.fn(batch, **job.dedup.kwargs))
        elif batch.num_rows:
            writer.write(batch)  # type: ignore[union-attr]
    result: dict[str, Any] = {"task": job.task, "stage": job.stage, "rows_in": rows_in, "dropped": dropped,
                              "quarantined": q.count,
                              "quarantine_examples": (examples + [list(e) for e in q.examples])[:20]}
    if job.dedup is not None:
        table = pa.Table.from_batches([b for b in out_batches if b.num_rows]) if any(b.num_rows for b in out_batches) else None
        sink = io.BytesIO()
        if table is not None:
            with ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
        with atomic_write(_work_path(job.sink, job.stage, job.task, "arrow"), **opts) as f:
            f.write(sink.getvalue())
        buf = io.BytesIO()
        merged = {k: np.concatenate([d[k] for d in keys]) for k in keys[0]} if keys else {}
        np.savez(buf, **merged)
        with atomic_write(_work_path(job.sink, job.stage, job.task, "keys.npz"), **opts) as f:
            f.write(buf.getvalue())
        result["rows_out"] = table.num_rows if table is not None else 0
    else:
        files = writer.close()  # type: ignore[union-attr]
        base = job.sink.path.rstrip("/") + "/"
        result["files"] = [{"path": f.path[len(base):] if f.path.startswith(base) else os.path.basename(f.path),
                            "rows": f.num_rows, "bytes": f.num_bytes, "xxh64": f.checksum} for f in files]
        result["rows_out"] = sum(f.num_rows for f in files)
    with atomic_write(marker, "w", **opts) as f:
        f.write(json.dumps(result, sort_keys=True))
    return result


def _merge(into: dict[str, dict[str, int]], other: dict[str, dict[str, int]]) -> None:
    for op, reasons in other.items():
        for reason, n in reasons.items():
            into.setdefault(op, {}).setdefault(reason, 0)
            into[op][reason] += n


def _fingerprint(index: DatasetIndex, ops: Sequence[Op], sink: Sink, tasks: Sequence[Sequence[Piece]]) -> str:
    h = hashlib.sha1()
    for f in index.files:
        h.update(f"{f.path}|{f.size}|{f.fingerprint}\n".encode())
    for op in ops:
        h.update(repr((op.name, op.kind, getattr(op.fn, "__qualname__", ""), sorted(op.kwargs.items(), key=str))).encode())
    h.update(repr((sink.format, sink.target_shard_bytes, sorted((k, v) for k, v in sink.options.items() if k != "storage_options"))).encode())
    h.update(repr([[(p.unit, p.lo, p.hi) for p in t] for t in tasks]).encode())
    return h.hexdigest()


def run_pipeline(
    index: DatasetIndex,
    ops: Sequence[Op],
    sink: Sink,
    tasks: Sequence[Sequence[Piece]],
    *,
    backend: Any = None,
    num_proc: int | None = None,
    on_error: str = "raise",
    columns: Sequence[str] | None = None,
    progress: bool = True,
) -> RunResult:
    """Run ``ops`` over ``tasks`` of ``index`` into ``sink`` (see the module docstring)."""
    from shardwise.index import open_dataset
    from shardwise.parallel import parallel_map

    if on_error not in ("raise", "skip"):
        raise ConfigError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    opts = sink.options.get("storage_options", {})
    stages: list[tuple[list[Op], Op | None]] = [([], None)]
    for op in ops:
        if op.kind == "dedup":
            stages[-1] = (stages[-1][0], op)
            stages.append(([], None))
        else:
            stages[-1][0].append(op)
    fp = _fingerprint(index, ops, sink, tasks)
    fp_path = join(sink.path, WORK, "pipeline.json")
    if _exists(fp_path, opts):
        if _read_json(fp_path, opts).get("fingerprint") != fp:
            raise ConfigError(f"{sink.path} holds the output of another pipeline or input; use a new output directory")
        if _exists(join(sink.path, MANIFEST_NAME), opts):  # already complete: nothing to redo
            m = _read_json(join(sink.path, MANIFEST_NAME), opts)
            return RunResult(m["rows_in"], m["rows_out"], m["dropped"], m["quarantined"], m["files"],
                             m["tasks"], m["tasks"], join(sink.path, MANIFEST_NAME), m["quarantine_examples"])
    elif _exists(join(sink.path, MANIFEST_NAME), opts):
        raise ConfigError(f"{sink.path} already holds a committed dataset; use a new output directory")
    else:
        with atomic_write(fp_path, "w", **opts) as f:
            f.write(json.dumps({"fingerprint": fp}))
    _clean_temporaries(sink.path, opts)
    dedup_names = _op_names([op for op in ops if op.kind == "dedup"])
    results: list[dict[str, Any]] = []
    dedup_summaries: dict[str, Any] = {}
    skipped = 0
    for s, (stage_ops, dedup) in enumerate(stages):
        if s > 0:
            dedup_op = stages[s - 1][1]
            assert dedup_op is not None
            ctx = DedupContext([_work_path(sink, s - 1, t, "keys.npz") for t in range(len(tasks))],
                               join(sink.path, WORK, f"d{s}"), dict(dedup_op.kwargs), backend, num_proc,
                               opts, progress, sink.path)
            masks, summary = dedup_op.fn.decide(ctx)  # type: ignore[attr-defined]
            dedup_summaries[dedup_names[s - 1]] = summary
            for t, keep in enumerate(masks):
                buf = io.BytesIO()
                np.save(buf, keep)
                with atomic_write(_work_path(sink, s, t, "keep.npy"), **opts) as f:
                    f.write(buf.getvalue())
        jobs = [_Job(t, s, tuple(p), index, tuple(stage_ops), dedup, dedup_names[s - 1] if s else "",
                     sink, on_error, tuple(columns) if columns else None) for t, p in enumerate(tasks)]
        desc = f"stage {s + 1}/{len(stages)}" if len(stages) > 1 else "tasks"
        stage_results = parallel_map(_run_job, jobs, backend=backend, num_proc=num_proc, desc=desc,
                                     progress=progress, chunksize=1)
        skipped += sum(1 for r in stage_results if r.get("skipped"))
        results.append({"stage_results": stage_results})
    final = sorted(results[-1]["stage_results"], key=lambda r: r["task"])  # cumulative per task
    rows_in = sum(r["rows_in"] for r in final)
    quarantined = sum(r["quarantined"] for r in final)
    dropped: dict[str, dict[str, int]] = {}
    for r in final:
        _merge(dropped, r["dropped"])
    files = [f for r in final for f in r["files"]]
    examples = [e for r in final for e in r["quarantine_examples"]][:20]
    manifest = {
        "version": 1,
        "files": files,
        "rows_in": rows_in,
        "rows_out": sum(f["rows"] for f in files),
        "dropped": dropped,
        "quarantined": quarantined,
        "quarantine_examples": examples,
        "tasks": len(tasks),
        "operators": [op.describe() for op in ops],
        "dedup": dedup_summaries,
    }
    manifest_path = join(sink.path, MANIFEST_NAME)
    with atomic_write(manifest_path, "w", **opts) as f:
        f.write(json.dumps(manifest, indent=1, sort_keys=True))
    if files:
        open_dataset(sink.path, format=sink.format, progress=False, storage_options=opts)
    fs, work = resolve(join(sink.path, WORK), **opts)
    for s in range(1, len(stages) + 1):  # intermediates are no longer needed once committed
        for stage_dir in (f"{work}/s{s - 1}", f"{work}/d{s}"):
            if fs.exists(stage_dir):
                fs.rm(stage_dir, recursive=True)
    return RunResult(rows_in, manifest["rows_out"], dropped, quarantined, files, len(tasks),
                     skipped // max(len(stages), 1), manifest_path, examples)


def _clean_temporaries(root: str, storage_options: dict[str, Any]) -> None:
    """Remove temporary files a crashed run left behind (never committed, never read)."""
    fs, path = resolve(root, **storage_options)
    if not fs.exists(path):
        return
    for p in fs.find(path):
        if p.rsplit("/", 1)[-1].startswith("_tmp."):
            fs.rm(p)
