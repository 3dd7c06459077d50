"""Column operators: select, rename, drop."""

from __future__ import annotations

import pyarrow as pa

from shardwise.errors import ConfigError

__all__ = ["drop_columns", "rename_columns", "select_columns"]


def _check(batch: pa.RecordBatch, names: list[str], op: str) -> None:
    missing = [n for n in names if n not in batch.schema.names]
    if missing:
        raise ConfigError(f"{op}: no column {missing[0]!r}; columns are {batch.schema.names}")


def select_columns(batch: pa.RecordBatch, *, columns: list[str]) -> pa.RecordBatch:
    """Keep ``columns``, in that order."""
    _check(batch, list(columns), "select_columns")
    return batch.select(list(columns))


def drop_columns(batch: pa.RecordBatch, *, columns: list[str]) -> pa.RecordBatch:
    """Remove ``columns``."""
    _check(batch, list(columns), "drop_columns")
    return batch.select([n for n in batch.schema.names if n not in set(columns)])


def rename_columns(batch: pa.RecordBatch, *, mapping: dict[str, str]) -> pa.RecordBatch:
    """Rename columns ``{old: new}``."""
    _check(batch, list(mapping), "rename_columns")
    return batch.rename_columns([mapping.get(n, n) for n in batch.schema.names])
