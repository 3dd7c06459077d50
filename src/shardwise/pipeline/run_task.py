"""Run one stage of one task: read its input, apply the operators, keep the ledger, and
write either the stage's intermediate rows and dedup keys or the final shards."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc

from shardwise._tokens import count_tokens
from shardwise.errors import UnsupportedError
from shardwise.formats import OnError, Quarantine, get_format
from shardwise.index import DatasetIndex
from shardwise.ops._compute import bool_array, count_true, filter_rows
from shardwise.ops.dedup import DedupOp
from shardwise.pipeline._npyload import load_npy
from shardwise.pipeline.commit import Layout, exists, read_json, write_json
from shardwise.pipeline.ledger import Ledger
from shardwise.pipeline.sink import Sink
from shardwise.pipeline.stages import Stage
from shardwise.pipeline.task_split import Piece
from shardwise.storage import atomic_write, info, open_arrow_input, open_input

__all__ = ["Job", "run_job"]


@dataclass(frozen=True)
class Job:
    """One stage of one task (picklable: it travels to the backend's workers)."""

    task: int
    stage: Stage
    pieces: tuple[Piece, ...]
    index: DatasetIndex
    sink: Sink
    layout: Layout
    on_error: OnError
    columns: tuple[str, ...] | None

    @property
    def marker(self) -> str:
        """Written last: the task's manifest (last stage) or the stage's done marker."""
        if self.stage.last:
            return self.layout.task_manifest(self.task)
        return self.layout.stage_file(self.stage.index, self.task, "done.json")


def run_job(job: Job) -> dict[str, Any]:
    """Run ``job`` unless already committed; return its result (ledger, files, seconds)."""
    opts = job.layout.storage_options
    done = _done_before(job)
    if done is not None:
        return {**done, "skipped": True}
    started = time.time()
    ledger, timings = _carried_ledger(job)
    q = Quarantine()
    batches, keep = _stage_input(job, q)
    result = _write_stage(job, _apply(job, batches, keep, ledger), ledger)
    ledger.quarantine(q.count, q.examples)
    result.update(ledger.to_json())
    seconds = round(time.time() - started, 6)
    result.update(
        {
            "task": job.task,
            "stage": job.stage.index,
            "started": started,
            "seconds": seconds,
            "stages": [
                *timings,
                {"stage": job.stage.index, "started": started, "seconds": seconds},
            ],
        }
    )
    write_json(job.marker, result, opts, durable=job.stage.last)
    return result


def _done_before(job: Job) -> dict[str, Any] | None:
    """The result of an earlier run of ``job``, if it finished. An intermediate stage's
    files and marker are written without fsync (they are no output, and flushing ~2x the
    input's bytes cost more than the rest of their writing): after a power loss its
    marker may be cut short or its files shorter than it says, and the stage is redone."""
    opts = job.layout.storage_options
    if not exists(job.marker, opts):
        return None
    if job.stage.last:
        return dict(read_json(job.marker, opts))
    try:
        done = dict(read_json(job.marker, opts))
    except ValueError:  # cut short
        return None
    for ext, size in done.get("stage_bytes", {}).items():
        path = job.layout.stage_file(job.stage.index, job.task, ext)
        if not exists(path, opts) or info(path, **opts).size != size:
            return None
    return done


def _carried_ledger(job: Job) -> tuple[Ledger, list[dict[str, Any]]]:
    """The task's ledger and per-stage times from the earlier stages (fresh for stage 0)."""
    if job.stage.index == 0:
        units = (
            job.index.units
        )  # samples indexing left out (on_error="skip") are read and quarantined
        rows = sum(
            units[p.unit].num_samples + units[p.unit].skipped if p.hi < 0 else p.hi - p.lo
            for p in job.pieces
        )
        return Ledger(rows_in=rows), []
    before = read_json(
        job.layout.stage_file(job.stage.index - 1, job.task, "done.json"),
        job.layout.storage_options,
    )
    ledger = Ledger.from_json(before)
    ledger.rows_out = ledger.tokens_out = 0
    return ledger, list(before.get("stages", []))


def _source_batches(job: Job, q: Quarantine) -> Iterator[pa.RecordBatch]:
    fmt = get_format(job.index.format, storage_options=job.index.storage_options)
    cols = list(job.columns) if job.columns else None
    for piece in job.pieces:
        unit = job.index.units[piece.unit]
        batches = fmt.read_unit(
            unit, columns=cols, on_error=job.on_error, quarantine=q, schema=job.index.schema
        )
        if piece.hi < 0:
            yield from batches
            continue
        seen = 0
        for batch in batches:
            a, b = max(piece.lo - seen, 0), min(piece.hi - seen, batch.num_rows)
            if b > a:
                yield batch.slice(a, b - a)
            seen += batch.num_rows
            if seen >= piece.hi:
                break


def _stage_input(job: Job, q: Quarantine) -> tuple[Iterator[pa.RecordBatch], np.ndarray | None]:
    if job.stage.index == 0:
        return _source_batches(job, q), None
    opts = job.layout.storage_options
    # mapped where local (no copy of the rows into a read buffer: the filter below copies
    # the kept ones anyway); read the ordinary way elsewhere
    with open_arrow_input(
        job.layout.stage_file(job.stage.index - 1, job.task, "arrow"), **opts
    ) as f:  # a task that kept no row wrote an empty file (no schema, no batch)
        batches = ipc.open_file(f).read_all().to_batches() if _size(f) else []
    with open_input(job.layout.stage_file(job.stage.index, job.task, "keep.npy"), **opts) as f:
        keep = load_npy(f.read())
    return iter(batches), keep


def _size(f: Any) -> int:
    """A file's size: Arrow's files have the method, fsspec's the attribute."""
    size = f.size
    return int(size() if callable(size) else size)


def _apply(
    job: Job, batches: Iterator[pa.RecordBatch], keep: np.ndarray | None, ledger: Ledger
) -> Iterator[pa.RecordBatch]:
    """The stage's rows: the dedup keep-mask, then each mapper and filter in turn."""
    offset = 0
    for batch in batches:
        if keep is not None:
            m = keep[offset : offset + batch.num_rows]
            offset += batch.num_rows
            ledger.drop(job.stage.after, "duplicate", int((~m).sum()))
            if not m.all():
                batch = filter_rows(batch, bool_array(m))
        for name, op in zip(job.stage.names, job.stage.ops):
            if batch.num_rows == 0:
                break
            if op.kind == "map":
                before = count_tokens(batch)
                batch = op.map(batch)
                ledger.tokens_in += max(count_tokens(batch) - before, 0)
                continue
            mask, reason = op.mask(batch)
            gone = batch.num_rows - count_true(mask)
            if gone:
                ledger.drop(name, reason, gone)
                batch = filter_rows(batch, mask)
        if batch.num_rows:
            yield batch


def _write_stage(job: Job, batches: Iterator[pa.RecordBatch], ledger: Ledger) -> dict[str, Any]:
    if job.stage.dedup is None:
        return _write_output(job, batches, ledger)
    return _write_intermediate(job, job.stage.dedup.dedup, batches, ledger)


def _write_output(job: Job, batches: Iterator[pa.RecordBatch], ledger: Ledger) -> dict[str, Any]:
    sink = job.sink
    writer = get_format(sink.format, storage_options=sink.storage_options).open_writer(
        job.layout.part_prefix(job.task), target_shard_bytes=sink.target_shard_bytes, **sink.options
    )
    try:
        for batch in batches:
            ledger.tokens_out += count_tokens(batch)
            writer.write(batch)
    except UnsupportedError as exc:  # named at the staged shard: name the output too
        raise UnsupportedError(f"output {sink.path} ({sink.format}): {exc}") from exc
    files = writer.close()
    ledger.rows_out = sum(f.num_rows for f in files)
    return {
        "files": [
            {
                "path": job.layout.relative(f.path),
                "rows": f.num_rows,
                "bytes": f.num_bytes,
                "xxh64": f.checksum,
            }
            for f in files
        ]
    }


def _write_intermediate(
    job: Job, dedup: DedupOp, batches: Iterator[pa.RecordBatch], ledger: Ledger
) -> dict[str, Any]:
    """The stage's rows (Arrow IPC) and the ending dedup's keys (``.npz``)."""
    kept: list[pa.RecordBatch] = []
    keys: list[dict[str, np.ndarray]] = []
    for batch in batches:
        ledger.tokens_out += count_tokens(batch)
        kept.append(batch)
        keys.append(dedup.keys(batch))
    opts = job.layout.storage_options
    sizes = {}
    with atomic_write(
        job.layout.stage_file(job.stage.index, job.task, "arrow"), durable=False, **opts
    ) as f:
        if kept:  # straight into the file: a copy through memory cost as much as the write
            with ipc.new_file(f, kept[0].schema) as w:
                for batch in kept:
                    w.write_batch(batch)
        sizes["arrow"] = f.tell()
    merged = {k: np.concatenate([d[k] for d in keys]) for k in keys[0]} if keys else {}
    with atomic_write(
        job.layout.stage_file(job.stage.index, job.task, "keys.npz"), durable=False, **opts
    ) as f:
        _save_npz(f, merged)
        sizes["keys.npz"] = f.tell()
    ledger.rows_out = sum(b.num_rows for b in kept)
    return {"stage_bytes": sizes}


def _save_npz(f: Any, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` into ``f``: straight into a seekable file (a local one), else through
    memory (zip members then carry their sizes in the header, as local files do)."""
    if f.seekable():
        np.savez(f, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds as its own flags
        return
    buf = io.BytesIO()
    np.savez(buf, **arrays)  # type: ignore[arg-type]
    f.write(buf.getvalue())
