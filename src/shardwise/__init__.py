"""shardwise: process large ML datasets on any backend, stream exact shards to training.

The public names load on first use (PEP 562): ``import shardwise`` costs only the
exception tree, and a worker process that imports one submodule for its task does not
pay for the rest of the package (pyarrow, fsspec, the run report, ...).
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING
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
from shardwise.pipeline.hooks import on_run_published as _on_run_published

if TYPE_CHECKING:
    from shardwise.index import DatasetIndex, index_dataset, open_dataset
    from shardwise.loader import StreamingDataset
    from shardwise.loader.source import Source
    from shardwise.loader.tokens import TokenStream
    from shardwise.parallel import parallel_backend, parallel_map
    from shardwise.pipeline import read_jsonl, read_parquet, read_webdataset
    from shardwise.preparing import prepare

__version__ = "0.1.0"

__all__ = [
    "CommitError",
    "ConfigError",
    "DatasetIndex",
    "EmptyDatasetError",
    "FormatError",
    "MissingExtraError",
    "Pipeline",
    "PlanError",
    "RunResult",
    "ShardwiseError",
    "Source",
    "StorageError",
    "StreamingDataset",
    "TaskError",
    "TokenStream",
    "UnsafeMemberError",
    "UnsupportedError",
    "__version__",
    "index_dataset",
    "open_dataset",
    "parallel_backend",
    "parallel_map",
    "prepare",
    "read_jsonl",
    "read_parquet",
    "read_webdataset",
]

# public name -> the module it lives in (StreamingDataset subclasses torch's
# IterableDataset when torch is installed: built on first use, never at import)
_LAZY = {
    "DatasetIndex": "shardwise.index",
    "index_dataset": "shardwise.index",
    "open_dataset": "shardwise.index",  # deprecated alias of index_dataset (warns)
    "Pipeline": "shardwise.pipeline",
    "RunResult": "shardwise.pipeline",
    "parallel_backend": "shardwise.parallel",
    "parallel_map": "shardwise.parallel",
    "prepare": "shardwise.preparing",
    "read_jsonl": "shardwise.pipeline",
    "read_parquet": "shardwise.pipeline",
    "read_webdataset": "shardwise.pipeline",
    "StreamingDataset": "shardwise.loader",
    "Source": "shardwise.loader.source",
    "TokenStream": "shardwise.loader.tokens",
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'shardwise' has no attribute {name!r}")
    value = getattr(_importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    # the lazily loaded public names are listed for completion and dir()
    return sorted(set(globals()) | set(__all__))


def _write_run_report(output: str, storage_options: dict[str, _Any]) -> object:
    """Every published run gets its ``_report.html``; the report layer (which the
    pipeline cannot import) loads when the first run is published, not with shardwise."""
    from shardwise.report import write_run_report

    return write_run_report(output, storage_options)


_on_run_published("report", _write_run_report)
