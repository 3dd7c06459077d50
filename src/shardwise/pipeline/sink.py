"""Where a pipeline's results go."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Sink"]


@dataclass(frozen=True)
class Sink:
    """``format`` shards of about ``target_shard_bytes`` under ``path``.

    Attributes:
        path: output directory (local path or URL).
        format: ``parquet``, ``jsonl`` or ``webdataset``.
        target_shard_bytes: size at which a shard is closed and the next begun.
        options: writer options (e.g. ``compression``, ``row_group_rows``).
        storage_options: fsspec options of the output location.
    """

    path: str
    format: str = "parquet"
    target_shard_bytes: int = 128 * 2**20
    options: dict[str, Any] = field(default_factory=dict)
    storage_options: dict[str, Any] = field(default_factory=dict)
