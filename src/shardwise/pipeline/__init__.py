"""Processing pipelines: operators on Arrow batches, run on any backend, committed atomically.

The public names load on first use (PEP 562): a worker process that runs one stage's
task imports :mod:`shardwise.pipeline.run_task` without the builder and the runner.

May import: ``shardwise.errors``, ``shardwise._optional``, ``shardwise.storage``,
``shardwise.formats``, ``shardwise.parallel``, ``shardwise.index``, ``shardwise.ops``
and ``shardwise.dedup`` (see ``docs/layers.toml``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardwise.pipeline.api import Pipeline, read_jsonl, read_parquet, read_webdataset, resplit
    from shardwise.pipeline.runner import RunResult, Sink

__all__ = [
    "Pipeline",
    "RunResult",
    "Sink",
    "read_jsonl",
    "read_parquet",
    "read_webdataset",
    "resplit",
]

_LAZY = {"RunResult": "shardwise.pipeline.runner", "Sink": "shardwise.pipeline.runner"}


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module 'shardwise.pipeline' has no attribute {name!r}")
    value = getattr(importlib.import_module(_LAZY.get(name, "shardwise.pipeline.api")), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
