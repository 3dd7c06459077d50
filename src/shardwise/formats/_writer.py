"""Shared machinery for rolling shard writers: naming, size rollover, commit."""

from __future__ import annotations

import io
from abc import ABC, abstractmethod

import pyarrow as pa
import xxhash

from shardwise.errors import ConfigError
from shardwise.formats.contract import WrittenFile
from shardwise.storage import atomic_write


class RollingWriter(ABC):
    """Buffers one shard in memory and commits it atomically when it is full.

    Subclasses encode batches into ``self._buf`` (a BytesIO) via :meth:`_append`
    and finish a shard's bytes in :meth:`_finish`. Shards are named
    ``{prefix}-{n:05d}.{ext}`` and overshoot the target by at most about an eighth of it (big
    batches are sliced).

    Args:
        prefix: path or URL prefix of the shards.
        ext: file extension without the dot.
        target_shard_bytes: roll over to a new shard once a shard reaches this size.
        storage_options: fsspec options for remote prefixes.
    """

    def __init__(
        self, prefix: str, ext: str, target_shard_bytes: int, storage_options: dict | None = None
    ) -> None:
        if target_shard_bytes < 1:
            raise ConfigError(f"target_shard_bytes must be >= 1, got {target_shard_bytes}")
        self.prefix = prefix
        self.ext = ext
        self.target_shard_bytes = target_shard_bytes
        self.storage_options = storage_options or {}
        self.written: list[WrittenFile] = []
        self._buf: io.BytesIO | None = None
        self._rows = 0
        self._closed = False

    def write(self, batch: pa.RecordBatch) -> None:
        """Append a batch, committing the current shard whenever it is full.

        A batch larger than an eighth of the target is written in slices, so shards
        overshoot the target by at most about that much, whatever the input batch size.
        """
        if self._closed:
            raise ConfigError("writer is closed")
        if batch.num_rows == 0:
            return
        piece = self.target_shard_bytes // 8
        if batch.num_rows > 1 and batch.nbytes > piece:
            rows = max(1, int(batch.num_rows * piece / batch.nbytes))
            for start in range(0, batch.num_rows, rows):
                self._write_one(batch.slice(start, rows))
            return
        self._write_one(batch)

    def _write_one(self, batch: pa.RecordBatch) -> None:
        if self._buf is None:
            self._buf = io.BytesIO()
            self._start()
        self._append(batch)
        self._rows += batch.num_rows
        if self._size() >= self.target_shard_bytes:
            self._commit()

    def close(self) -> list[WrittenFile]:
        """Commit the last shard and return every committed shard in order."""
        if not self._closed:
            if self._buf is not None:
                self._commit()
            self._closed = True
        return list(self.written)

    def _commit(self) -> None:
        assert self._buf is not None
        data = self._finish()
        path = f"{self.prefix}-{len(self.written):05d}.{self.ext}"
        with atomic_write(path, "wb", **self.storage_options) as f:
            f.write(data)
        self.written.append(
            WrittenFile(path, self._rows, len(data), xxhash.xxh64(data).hexdigest())
        )
        self._buf = None
        self._rows = 0

    def _size(self) -> int:
        return self._buf.tell() if self._buf is not None else 0

    def _start(self) -> None:  # noqa: B027 - optional hook
        """Called when a new shard starts."""

    @abstractmethod
    def _append(self, batch: pa.RecordBatch) -> None:
        """Encode ``batch`` into the current shard."""

    @abstractmethod
    def _finish(self) -> bytes:
        """Return the complete bytes of the current shard."""

    def __enter__(self) -> RollingWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self._buf = None
            self._closed = True
