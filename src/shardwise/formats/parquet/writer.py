"""Parquet shards written rolling over at a target size, row groups of a set size."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise._tokens import token_columns
from shardwise.errors import ConfigError, UnsupportedError
from shardwise.formats._writer import RollingWriter

__all__ = ["ParquetShardWriter"]

TOKEN_PAGE_BYTES = 2**30  # one page per row group: its tokens one run of bytes


def _column_options(batch: pa.RecordBatch, compression: str) -> dict[str, Any]:
    """Writer options: token columns (:mod:`shardwise._tokens`) uncompressed, as
    ``DELTA_LENGTH_BYTE_ARRAY`` in one page per row group, without dictionary or statistics
    (a document's whole token array would be its min and max; token ids barely compress):
    a row group's tokens are then one run of the file's bytes, which a token stream maps
    instead of decoding (:mod:`~shardwise.formats.parquet.tokenpages`); every column as
    Arrow's defaults have it when there is none."""
    tokens = token_columns(batch.schema)
    if not tokens:
        return {"write_statistics": True, "compression": compression}
    rest = [n for n in batch.schema.names if n not in tokens]
    return {
        "write_statistics": rest,
        "use_dictionary": rest,
        "compression": {n: compression for n in rest} | {n: "none" for n in tokens},
        "column_encoding": {n: "DELTA_LENGTH_BYTE_ARRAY" for n in tokens},
        "data_page_size": TOKEN_PAGE_BYTES,
    }


class ParquetShardWriter(RollingWriter):
    """Writes Parquet shards rolling over at ``target_shard_bytes``.

    Args:
        prefix: path or URL prefix of the shards.
        target_shard_bytes: approximate size of each shard (default 128 MiB).
        row_group_rows: rows per row group.
        compression: Parquet codec (``zstd``, ``snappy``, ``gzip``, ``none``).
        storage_options: fsspec options for remote prefixes.
    """

    def __init__(
        self,
        prefix: str,
        *,
        target_shard_bytes: int = 128 * 2**20,
        row_group_rows: int = 65536,
        compression: str = "zstd",
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(prefix, "parquet", target_shard_bytes, storage_options)
        if row_group_rows < 1:
            raise ConfigError(f"row_group_rows must be >= 1, got {row_group_rows}")
        self.row_group_rows = row_group_rows
        self.compression = compression
        self._writer: pq.ParquetWriter | None = None
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0

    def _append(self, batch: pa.RecordBatch) -> None:
        """Encode ``batch`` into the current shard.

        Raises:
            UnsupportedError: rows with no columns (records without fields, such as JSON
                lines ``{}``), which Parquet cannot store: written, they were lost.
        """
        if not batch.num_columns:
            raise UnsupportedError(
                f"{self.prefix}: {batch.num_rows} rows with no columns cannot be written: "
                "Parquet cannot store rows without columns (JSONL can, as {} lines)"
            )
        if self._writer is None:
            options = _column_options(batch, self.compression)
            self._writer = pq.ParquetWriter(self._buf, batch.schema, **options)
        self._pending.append(batch)
        self._pending_rows += batch.num_rows
        while self._pending_rows >= self.row_group_rows:
            self._flush(self.row_group_rows)

    def _flush(self, rows: int) -> None:
        assert self._writer is not None
        table = pa.Table.from_batches(self._pending)
        head, rest = table.slice(0, rows), table.slice(rows)
        self._writer.write_table(head, row_group_size=rows)
        self._pending = rest.to_batches() if rest.num_rows else []
        self._pending_rows = rest.num_rows

    def _size(self) -> int:
        pending = sum(b.nbytes for b in self._pending) // 3  # rough compressed estimate
        return super()._size() + pending

    def _finish(self) -> bytes:
        assert self._writer is not None and self._buf is not None
        if self._pending_rows:
            self._flush(self._pending_rows)
        self._writer.close()
        self._writer = None
        return self._buf.getvalue()
