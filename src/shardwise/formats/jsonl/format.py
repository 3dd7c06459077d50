"""JSONL: streaming reads of line-aligned byte ranges, exact counts, rolling writer.

Units are byte ranges of about ``unit_bytes`` cut at newlines; a ``.gz`` or ``.zst``
file is one unit, read by streaming decompression. Blocks of complete lines are
parsed by ``pyarrow.json`` against the dataset schema; when a block fails, its lines
are parsed one by one so the error names the exact line, or (``on_error="skip"``)
the bad lines are quarantined and counted while the good ones are kept. A bad
record is malformed JSON, invalid UTF-8, a line that is not a JSON object, a field
not in the schema, a value that does not fit the schema's type, or a record nested
deeper than ``MAX_DEPTH`` levels (such records crash Arrow's parser and exhaust
Python's, so they never reach either).

Mixed types: each file's schema is inferred from its first MiB of records, and the
dataset's schema unifies the files' (ints and floats give floats; a field only ever
null there takes its type from the other files, or else is a string column that stores
later non-string values as JSON text). A field whose values
have different JSON types (``1`` and ``"a"``, or an array such as ``[1, "a"]``), in one
file or between files, becomes a string column: strings are kept as they are and every
other value is stored as its compact JSON text, so nothing is lost, each row has one
type, and the files' order does not matter. Other fields keep their inferred type, and
a later value that does not fit it is a bad record. Integers beyond int64 are no other
JSON type: a field of whole numbers up to ``2**64 - 1`` is ``uint64``; one no Arrow
integer holds is a bad record (the field typed from its other values), never text.

A compressed file that is truncated, or is not in the format its suffix says, is an
error naming the file and the line where decompression stopped; under ``on_error="skip"``
the records before that line are kept and the rest of the file is one quarantined
(and, while indexing, skipped) record naming that line. A file that is plainly
not JSON lines (a Parquet or tar file, or a compressed one without ``.gz``/``.zst``, read
with ``format="jsonl"``) is refused while indexing, before its bytes are counted as lines.
"""

from __future__ import annotations

import base64
import datetime
import gzip
import json
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from shardwise.errors import ConfigError, FormatError
from shardwise.formats._writer import RollingWriter
from shardwise.formats.contract import (
    OnError,
    Quarantine,
    TableFromBatches,
    Unit,
    check_columns,
    check_on_error,
    suffixes_of,
)
from shardwise.formats.jsonl._lines import (
    check_is_text,
    compression_of,
    count_records,
    iter_aligned,
    split_ranges,
)
from shardwise.formats.jsonl._records import parse_block, sample_rows
from shardwise.formats.jsonl._rules import infer_schema, unify_fields

__all__ = ["JsonlFormat", "JsonlShardWriter"]

_SAMPLE_BYTES = 1 << 20


class JsonlFormat(TableFromBatches):
    """JSON Lines files (optionally ``.gz``/``.zst``); a unit is a byte range.

    Args:
        unit_bytes: target size of one unit of an uncompressed file.
        block_bytes: bytes parsed at once (bounds memory with the longest line).
        storage_options: fsspec options for remote paths.
    """

    name = "jsonl"
    extensions = suffixes_of("jsonl")

    def __init__(
        self,
        unit_bytes: int = 32 * 2**20,
        block_bytes: int = 8 * 2**20,
        storage_options: dict[str, Any] | None = None,
        on_error: OnError = "raise",
    ) -> None:
        if unit_bytes < 1 or block_bytes < 1:
            raise ConfigError("unit_bytes and block_bytes must be >= 1")
        self.unit_bytes = unit_bytes
        self.block_bytes = block_bytes
        self.storage_options = storage_options or {}
        self.on_error = check_on_error(on_error)

    def list_units(self, path: str, size: int) -> list[Unit]:
        """Cut the file into line-aligned ranges and count their records."""
        check_is_text(path, self.storage_options)
        if compression_of(path) is not None:
            damaged: list[FormatError] = []
            keep = damaged.append if self.on_error == "skip" else None
            records = sum(
                count_records(p)[0]
                for p in iter_aligned(
                    path,
                    block_bytes=self.block_bytes,
                    storage_options=self.storage_options,
                    on_truncated=keep,
                )
            )
            return [Unit(path, 0, records, size, 0, size, 1, skipped=len(damaged))]
        ranges = split_ranges(path, size, self.unit_bytes, self.block_bytes, self.storage_options)
        return [Unit(path, i, n, e - s, s, e, line) for i, (s, e, n, line) in enumerate(ranges)]

    def read_schema(self, path: str) -> pa.Schema:
        """Infer the schema from the first MiB of records (null-only columns become strings)."""
        sample = b""
        # a damaged compressed file: the types of what can be read (reading says the rest)
        for piece in iter_aligned(
            path,
            block_bytes=_SAMPLE_BYTES,
            storage_options=self.storage_options,
            on_truncated=lambda error: None,
        ):
            sample += piece
            if len(sample) >= _SAMPLE_BYTES:
                break
        rows = sample_rows(sample)
        return infer_schema(rows)

    def read_unit(
        self,
        unit: Unit,
        *,
        columns: Sequence[str] | None = None,
        on_error: OnError = "raise",
        quarantine: Quarantine | None = None,
        schema: pa.Schema | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the unit's records in file order, block by block."""
        q = quarantine if quarantine is not None else Quarantine()
        schema = schema if schema is not None else self.read_schema(unit.path)
        check_columns(columns, schema)
        end = None if compression_of(unit.path) else unit.end
        line = unit.first_line or 1

        def damaged(error: FormatError) -> None:
            q.add(
                unit.path, error.location or "", f"{error.reason}; the rest of the file is left out"
            )

        for piece in iter_aligned(
            unit.path,
            start=unit.start,
            end=end,
            block_bytes=self.block_bytes,
            storage_options=self.storage_options,
            on_truncated=damaged if on_error == "skip" else None,
        ):
            table = parse_block(piece, schema, unit.path, line, on_error, q)
            line += piece.count(b"\n")
            if table is not None and table.num_rows:
                if columns is not None:
                    table = table.select(list(columns))
                yield from table.to_batches()

    def unify_schemas(self, schemas: Sequence[pa.Schema], paths: Sequence[str]) -> pa.Schema:
        """One schema for the dataset's files, by the mixed-type rule (module docstring):
        a field typed differently in two files holds JSON text, whatever the files' order."""
        return unify_fields(schemas)

    def open_writer(self, prefix: str, **options: Any) -> JsonlShardWriter:
        """Return a rolling writer of ``{prefix}-{n:05d}.jsonl[.gz|.zst]`` shards."""
        return JsonlShardWriter(prefix, storage_options=self.storage_options, **options)


def _exact(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Top-level columns JSON would not hold exactly through Python's objects, made so:
    durations as integers in their unit, nanosecond times of day as text; a decimal column
    is refused by name (JSON numbers would be floats)."""
    columns = []
    for field, col in zip(batch.schema, batch.columns):
        t = field.type
        if pa.types.is_decimal(t):
            raise FormatError(
                f"column {field.name!r} is {t}, which JSON cannot hold exactly: cast it to "
                "string (or float) in a map first"
            )
        if pa.types.is_duration(t):
            col = col.cast(pa.int64())
        elif pa.types.is_time64(t) and t.unit == "ns":
            col = col.cast(pa.string())
        columns.append(col)
    if not columns:
        return batch  # rows without columns (from_arrays would lose their count)
    return pa.RecordBatch.from_arrays(columns, names=batch.schema.names)


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return value.total_seconds()
    raise FormatError(f"{type(value).__name__} values cannot be written as JSON")


class JsonlShardWriter(RollingWriter):
    """Writes JSONL shards rolling over at ``target_shard_bytes`` (uncompressed size).

    Rows are written with ``json.dumps(..., ensure_ascii=False, separators=(",", ":"))``
    in column order; binary values become base64 text, dates and times ISO 8601 text,
    durations integers in their column's unit, NaN and infinities ``NaN``/``Infinity`` (as
    Python's ``json`` writes them, and reads them back); a decimal column is refused.

    Args:
        prefix: path or URL prefix.
        target_shard_bytes: approximate uncompressed size of a shard.
        compression: None, ``"gzip"`` or ``"zstd"`` (deterministic bytes either way).
        storage_options: fsspec options.
    """

    def __init__(
        self,
        prefix: str,
        *,
        target_shard_bytes: int = 128 * 2**20,
        compression: str | None = None,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        exts = {None: "jsonl", "gzip": "jsonl.gz", "zstd": "jsonl.zst"}
        if compression not in exts:
            raise ConfigError(f"compression must be None, 'gzip' or 'zstd', got {compression!r}")
        super().__init__(prefix, exts[compression], target_shard_bytes, storage_options)
        self.compression = compression

    def _append(self, batch: pa.RecordBatch) -> None:
        assert self._buf is not None
        dumps = json.dumps
        lines = [
            dumps(row, ensure_ascii=False, separators=(",", ":"), default=_json_default)
            for row in _exact(batch).to_pylist()
        ]
        self._buf.write(("\n".join(lines) + "\n").encode("utf-8"))

    def _finish(self) -> bytes:
        assert self._buf is not None
        raw = self._buf.getvalue()
        if self.compression == "gzip":
            return gzip.compress(raw, compresslevel=6, mtime=0)
        if self.compression == "zstd":
            return pa.compress(raw, codec="zstd", asbytes=True)
        return raw
