"""The Python API: ``read_*(...)`` -> ``.map() / .filter() / .dedup()`` -> ``.write_*()`` ->
``.run()``.

>>> import shardwise
>>> result = (shardwise.read_jsonl("raw/*.jsonl")            # doctest: +SKIP
...           .apply("normalize_text", column="text", lowercase=True)
...           .filter(lambda b: pc.greater(pc.utf8_length(b["text"]), 10), reason="short")
...           .dedup(method="exact", column="text")
...           .write_parquet("clean/", target_shard_bytes=128 * 2**20)
...           .run(backend="local"))
>>> print(result.table())                                  # doctest: +SKIP

A pipeline is immutable: every call returns a new one, so a partial chain can be reused.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from shardwise.errors import ConfigError
from shardwise.formats import OnError, check_format_options, check_on_error, get_format
from shardwise.index import OPEN_OPTIONS, DatasetIndex, index_dataset
from shardwise.ops.dedup import DedupOp
from shardwise.ops.operators import Op, get_op, make_op
from shardwise.parallel.backend import BackendSpec
from shardwise.parallel.cpus import cpu_count
from shardwise.pipeline.hooks import after_run
from shardwise.pipeline.runner import RunResult, run_pipeline
from shardwise.pipeline.sink import Sink
from shardwise.pipeline.stages import work_per_byte
from shardwise.pipeline.task_split import MIN_SPLIT, plan_tasks

__all__ = ["Pipeline", "read_jsonl", "read_parquet", "read_webdataset"]


@dataclass(frozen=True)
class Pipeline:
    """An input, a chain of operators and (once ``write_*`` is called) an output."""

    source: Any
    format: str | None = None
    ops: tuple[Op, ...] = ()
    sink: Sink | None = None
    on_error: OnError = "raise"
    columns: tuple[str, ...] | None = None
    read_options: tuple[tuple[str, Any], ...] = ()
    task_bytes: int = 32 * 2**20
    min_tasks: int = 1

    # -- building -------------------------------------------------------------------
    def apply(self, name: str, **kwargs: Any) -> Pipeline:
        """Add a registered operator by name (see :func:`shardwise.ops.known_ops`)."""
        return replace(self, ops=(*self.ops, get_op(name, **kwargs)))

    def map(self, fn: Callable[..., pa.RecordBatch] | str, **kwargs: Any) -> Pipeline:
        """Add a mapper: a registered name or a function ``fn(batch, **kwargs) -> batch``."""
        if isinstance(fn, str):
            return self.apply(fn, **kwargs)
        return replace(self, ops=(*self.ops, make_op(fn, "map", None, kwargs)))

    def filter(
        self, fn: Callable[..., Any] | str, *, reason: str | None = None, **kwargs: Any
    ) -> Pipeline:
        """Add a filter: a registered name or ``fn(batch, **kwargs)`` returning a boolean mask
        (True = keep) or ``(mask, reason)``; dropped rows are counted under ``reason``."""
        if isinstance(fn, str):
            return self.apply(fn, **kwargs)
        op = make_op(fn, "filter", None, kwargs)
        if reason is not None:
            op = Op(op.name, "filter", _Reasoned(fn, reason), op.kwargs)
        return replace(self, ops=(*self.ops, op))

    def dedup(
        self, method: str | DedupOp = "exact", column: str = "text", **kwargs: Any
    ) -> Pipeline:
        """Drop rows whose ``column`` duplicates an earlier row (in input order).

        ``method="exact"`` compares normalised content (NFKC, lower case, whitespace);
        ``"minhash"`` finds near-duplicates; a :class:`~shardwise.ops.dedup.DedupOp`
        instance runs your own."""
        if isinstance(method, DedupOp):
            if kwargs:
                raise ConfigError("give a DedupOp instance its parameters when you create it")
            op = Op(type(method).__name__, "dedup", method, dict(getattr(method, "__dict__", {})))
            return replace(self, ops=(*self.ops, op))
        if method == "exact":
            return self.apply("exact_dedup", column=column, **kwargs)
        if method == "minhash":
            return self.apply("minhash_dedup", column=column, **kwargs)
        raise ConfigError(f"dedup method must be 'exact' or 'minhash', got {method!r}")

    def select(self, columns: Sequence[str]) -> Pipeline:
        """Keep only ``columns``."""
        return self.apply("select_columns", columns=list(columns))

    def write(
        self,
        path: str,
        format: str = "parquet",
        *,
        target_shard_bytes: int = 128 * 2**20,
        storage_options: dict[str, Any] | None = None,
        **options: Any,
    ) -> Pipeline:
        """Set the output: ``format`` shards of about ``target_shard_bytes`` in ``path``
        (``storage_options`` for fsspec; by default the input's when on the same protocol)."""
        get_format(format)  # an unknown format fails here, not after the run
        return replace(
            self,
            sink=Sink(
                os.fspath(path),
                format,
                int(target_shard_bytes),
                options,
                dict(storage_options or {}),
            ),
        )

    def write_parquet(
        self, path: str, *, target_shard_bytes: int = 128 * 2**20, **options: Any
    ) -> Pipeline:
        """Write Parquet shards (options: ``row_group_rows``, ``compression``)."""
        return self.write(path, "parquet", target_shard_bytes=target_shard_bytes, **options)

    def write_jsonl(
        self, path: str, *, target_shard_bytes: int = 128 * 2**20, **options: Any
    ) -> Pipeline:
        """Write JSONL shards (option: ``compression`` None/``gzip``/``zstd``)."""
        return self.write(path, "jsonl", target_shard_bytes=target_shard_bytes, **options)

    def write_webdataset(
        self, path: str, *, target_shard_bytes: int = 256 * 2**20, **options: Any
    ) -> Pipeline:
        """Write WebDataset tar shards (rows need a ``__key__`` column)."""
        return self.write(path, "webdataset", target_shard_bytes=target_shard_bytes, **options)

    # -- running --------------------------------------------------------------------
    def index(self, progress: bool = False) -> DatasetIndex:
        """The input's dataset index."""
        if isinstance(self.source, DatasetIndex):
            return self.source
        options = dict(self.read_options)
        if self.format == "jsonl":  # cut JSONL into byte ranges no larger than a task
            unit = _jsonl_unit_bytes(self.task_bytes, work_per_byte(self.ops))
            options.setdefault("unit_bytes", unit)
        return index_dataset(
            self.source, self.format, progress=progress, on_error=self.on_error, **options
        )

    def run(
        self,
        backend: BackendSpec = None,
        *,
        num_proc: int | None = None,
        progress: bool = True,
        report: bool = True,
    ) -> RunResult:
        """Run on ``backend`` (default: the active one, else the local process pool).

        With ``report`` (and ``import shardwise``, which registers it), ``_report.html`` is
        written beside the output's manifest once the run is published."""
        if self.sink is None:
            raise ConfigError(
                "the pipeline has no output; call write_parquet()/write_jsonl()/write() first"
            )
        index = self.index(progress)
        tasks = plan_tasks(index, self.task_bytes, self.min_tasks, work=work_per_byte(self.ops))
        sink = self.sink
        if (
            not sink.storage_options
            and index.storage_options
            and _protocol(sink.path) == _protocol(index.files[0].path if index.files else "")
        ):
            sink = replace(sink, storage_options=dict(index.storage_options))
        result = run_pipeline(
            index,
            self.ops,
            sink,
            tasks,
            backend=backend,
            num_proc=num_proc,
            on_error=self.on_error,
            columns=self.columns,
            progress=progress,
        )
        if report:
            after_run(result.manifest.rsplit("/", 1)[0], sink.storage_options)
        return result


@dataclass(frozen=True)
class _Reasoned:
    fn: Callable[..., Any]
    reason: str

    def __call__(self, batch: pa.RecordBatch, **kwargs: Any) -> Any:
        out = self.fn(batch, **kwargs)
        return (out[0] if isinstance(out, tuple) else out), self.reason


def _jsonl_unit_bytes(task_bytes: int, work: float) -> int:
    """The byte ranges JSONL input is cut into: no larger than a task (nor 32 MiB), and
    finer under a CPU-heavy operator (``work`` per byte above 1.0), so that a small input
    still splits into tasks: half the finest task :func:`plan_tasks` may cut, so that
    files' remainders do not leave fewer units than tasks, but no finer than 64 KiB."""
    unit = task_bytes if work <= 1.0 else max(64 * 2**10, int(task_bytes / work / MIN_SPLIT / 2))
    return min(32 * 2**20, task_bytes, unit)


def _protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def _reader(fmt: str) -> Callable[..., Pipeline]:
    def read(
        path: Any,
        *,
        on_error: OnError = "raise",
        columns: Sequence[str] | None = None,
        task_bytes: int = 32 * 2**20,
        **options: Any,
    ) -> Pipeline:
        own = ("on_error", "columns", "task_bytes", *OPEN_OPTIONS)
        check_format_options(
            fmt, {k: v for k, v in options.items() if k not in OPEN_OPTIONS}, f"read_{fmt}", own
        )
        return Pipeline(
            path,
            fmt,
            on_error=check_on_error(on_error),
            columns=tuple(columns) if columns else None,
            read_options=tuple(sorted(options.items())),
            task_bytes=int(task_bytes),
        )

    read.__name__ = f"read_{fmt}"
    read.__doc__ = (
        f"Start a pipeline reading {fmt} files (paths, globs, URLs or a directory).\n\n"
        "Args: ``on_error`` (``raise`` or ``skip``: quarantine and count bad records), "
        "``columns`` (read only these), ``task_bytes`` (input bytes per task), and "
        "options for :func:`shardwise.index_dataset` (e.g. ``storage_options``)."
    )
    return read


read_parquet = _reader("parquet")
read_jsonl = _reader("jsonl")
read_webdataset = _reader("webdataset")


def resplit(
    source: Any,
    out: str,
    *,
    target_file_bytes: int = 128 * 2**20,
    format: str | None = None,
    backend: BackendSpec = None,
    on_error: OnError = "raise",
    progress: bool = True,
) -> RunResult:
    """Rewrite a dataset as Parquet files of about ``target_file_bytes``, at least twice as
    many files as cores (more for small data), with the index written. The output appears
    whole or not at all; ``on_error="skip"`` quarantines and counts bad records."""
    p = Pipeline(source, format, on_error=check_on_error(on_error))
    index = p.index(progress)
    total = max(index.num_bytes, 1)
    cores = cpu_count()
    n = max(2 * cores, -(-total // target_file_bytes))
    per_file = max(1, total // n)
    return (
        replace(p, task_bytes=per_file, min_tasks=n)
        .write_parquet(out, target_shard_bytes=2**62)
        .run(backend, progress=progress)
    )
