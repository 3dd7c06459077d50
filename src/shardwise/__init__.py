"""shardwise: process large ML datasets on any backend, stream exact shards to training."""

from __future__ import annotations

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
)

from shardwise.index import DatasetIndex, open_dataset

__version__ = "0.1.0"

__all__ = [
    "CommitError",
    "ConfigError",
    "EmptyDatasetError",
    "FormatError",
    "MissingExtraError",
    "PlanError",
    "ShardwiseError",
    "StorageError",
    "TaskError",
    "UnsafeMemberError",
    "__version__",
    "open_dataset",
    "DatasetIndex",
]
