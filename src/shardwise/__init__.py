"""shardwise: process large ML datasets on any backend, stream exact shards to training."""

from __future__ import annotations

from typing import Any as _Any

from shardwise.errors import (
    CommitError,
    ConfigError,
    EmptyDatasetError,
    FormatError,
    MissingExtraError,
    PlanError,
    ShardwiseError,
    StorageError,
    TaskError,
    UnsafeMemberError,
    UnsupportedError,
)
from shardwise.index import DatasetIndex, open_dataset
from shardwise.parallel import parallel_backend, parallel_map
from shardwise.pipeline import read_jsonl, read_parquet, read_webdataset
from shardwise.pipeline.hooks import on_run_published as _on_run_published
from shardwise.prepare import prepare
from shardwise.report import write_run_report as _write_run_report

__version__ = "0.1.0"

# every published run gets its _report.html (the pipeline cannot import the report layer)
_on_run_published("report", _write_run_report)

__all__ = [
    "CommitError",
    "ConfigError",
    "DatasetIndex",
    "EmptyDatasetError",
    "FormatError",
    "MissingExtraError",
    "PlanError",
    "ShardwiseError",
    "Source",
    "StorageError",
    "StreamingDataset",
    "TaskError",
    "UnsafeMemberError",
    "UnsupportedError",
    "__version__",
    "open_dataset",
    "parallel_backend",
    "parallel_map",
    "prepare",
    "read_jsonl",
    "read_parquet",
    "read_webdataset",
]


def __getattr__(name: str) -> _Any:
    # StreamingDataset subclasses torch's IterableDataset when torch is installed; build it
    # on first use so that `import shardwise` never imports torch.
    if name == "StreamingDataset":
        from shardwise.loader import StreamingDataset

        return StreamingDataset
    if name == "Source":
        from shardwise.loader.sources import Source

        return Source
    raise AttributeError(f"module 'shardwise' has no attribute {name!r}")


def __dir__() -> list[str]:
    # the lazily built StreamingDataset is public too: list it for completion and dir()
    return sorted(set(globals()) | set(__all__))
