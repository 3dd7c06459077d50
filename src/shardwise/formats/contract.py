"""What every format provides: units with exact counts, and Arrow batches per unit.

A *unit* is the smallest piece of a file that can be read on its own: a Parquet row
group, a JSONL byte range aligned to line boundaries (or a whole compressed file),
or a WebDataset tar shard. Units carry exact sample counts so that the loader plan
and the processing planner can cut work by the data, never by the worker count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import pyarrow as pa

from shardwise._tokens import check_same_tokens
from shardwise.errors import ConfigError, FormatError

OnError = Literal["raise", "skip"]

# the one table of file suffixes shardwise reads, and the format of each
SUFFIXES: tuple[tuple[str, str], ...] = (
    (".parquet", "parquet"),
    (".pq", "parquet"),
    (".jsonl", "jsonl"),
    (".jsonl.gz", "jsonl"),
    (".jsonl.zst", "jsonl"),
    (".json", "jsonl"),
    (".json.gz", "jsonl"),
    (".json.zst", "jsonl"),
    (".ndjson", "jsonl"),
    (".ndjson.gz", "jsonl"),
    (".ndjson.zst", "jsonl"),
    (".tar", "webdataset"),
    (".tar.gz", "webdataset"),
    (".tgz", "webdataset"),
)


def suffixes_of(name: str) -> tuple[str, ...]:
    """The file suffixes of format ``name``."""
    return tuple(suffix for suffix, fmt in SUFFIXES if fmt == name)


def guess_format(path: str) -> str | None:
    """The format of ``path`` from its suffix (the longest that matches), or None."""
    low = path.lower()
    for suffix, name in sorted(SUFFIXES, key=lambda s: -len(s[0])):
        if low.endswith(suffix):
            return name
    return None


def check_on_error(value: object, where: str = "on_error") -> OnError:
    """``value`` as an :data:`OnError`, or a :class:`ConfigError` naming ``where``."""
    if value == "raise":
        return "raise"
    if value == "skip":
        return "skip"
    raise ConfigError(f"{where} must be 'raise' or 'skip', got {value!r}")


@dataclass(frozen=True)
class Unit:
    """One independently readable piece of a data file.

    Attributes:
        path: the file's path or URL, exactly as the storage layer resolved it.
        index: the unit's number inside the file (row group number, byte-range
            number; always 0 for a tar shard or a compressed JSONL file).
        num_samples: exact number of samples (rows) in the unit.
        num_bytes: bytes the unit occupies (compressed size on storage).
        start: first byte of the unit in the file (JSONL byte ranges; 0 otherwise).
        end: one past the last byte (JSONL byte ranges; file size otherwise).
        first_line: 1-based line number of the unit's first line (JSONL), for
            error messages; 0 when not applicable.
        skipped: bad samples found while indexing under ``on_error="skip"`` and left
            out of ``num_samples`` (reading quarantines them); 0 for formats that find
            bad records only when reading.
    """

    path: str
    index: int
    num_samples: int
    num_bytes: int
    start: int = 0
    end: int = 0
    first_line: int = 0
    skipped: int = 0


def unit_place(format_name: str, unit: Unit) -> str:
    """Where ``unit`` sits in its file, for error messages (``row group 3``)."""
    if format_name == "parquet":
        return f"row group {unit.index}"
    if format_name == "jsonl":
        first = f"line {unit.first_line}, " if unit.first_line else ""
        return f"{first}bytes {unit.start}-{unit.end}"
    return f"unit {unit.index}"


@dataclass
class Quarantine:
    """Bad records skipped under ``on_error="skip"``; counted, never dropped silently.

    Attributes:
        count: number of records skipped.
        examples: up to ``max_examples`` (path, location, reason) triples.
    """

    count: int = 0
    examples: list[tuple[str, str, str]] = field(default_factory=list)
    max_examples: int = 20

    def add(self, path: str, location: str, reason: str, count: int = 1) -> None:
        """Record one bad record (or ``count`` of them in one place: a row group's rows)."""
        self.count += count
        if len(self.examples) < self.max_examples:
            self.examples.append((path, location, reason))

    def merge(self, other: Quarantine) -> None:
        """Add another quarantine's counts and examples to this one."""
        self.count += other.count
        room = self.max_examples - len(self.examples)
        self.examples.extend(other.examples[: max(room, 0)])


class Format(Protocol):
    """The interface each format module implements (see ``formats/__init__.py``)."""

    name: str
    extensions: tuple[str, ...]

    def list_units(self, path: str, size: int) -> list[Unit]:
        """Read footers/headers/newlines of one file and return its units in order."""
        ...

    def read_schema(self, path: str) -> pa.Schema:
        """Return the file's Arrow schema (inferred from the first records if needed)."""
        ...

    def read_unit(
        self,
        unit: Unit,
        *,
        columns: Sequence[str] | None = None,
        on_error: OnError = "raise",
        quarantine: Quarantine | None = None,
        schema: pa.Schema | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the unit's rows as record batches, in file order.

        The batches hold exactly ``unit.num_samples`` rows in total, minus the bad
        records quarantined under ``on_error="skip"`` (added to ``quarantine``).
        ``schema``, when given, is the dataset-wide schema the batches are cast to
        (formats with a self-describing schema, such as Parquet, may ignore it).
        """
        ...

    def read_table(
        self,
        unit: Unit,
        *,
        columns: Sequence[str] | None = None,
        on_error: OnError = "raise",
        quarantine: Quarantine | None = None,
        schema: pa.Schema | None = None,
        use_threads: bool = True,
    ) -> pa.Table | None:
        """The unit's rows as one table (``None`` when nothing is left after quarantine);
        ``use_threads=False`` decodes on the calling thread only."""
        ...

    def unify_schemas(self, schemas: Sequence[pa.Schema], paths: Sequence[str]) -> pa.Schema:
        """One schema for a dataset whose file ``paths[i]`` has ``schemas[i]``.

        Raises:
            FormatError: the schemas cannot be one, naming the first file that differs.
        """
        ...

    def open_writer(self, prefix: str, **options: object) -> ShardWriter:
        """Return a writer producing shards named ``{prefix}-{n:05d}.{ext}``."""
        ...


def check_columns(columns: Sequence[str] | None, schema: pa.Schema) -> None:
    """Refuse a projection naming a column the dataset does not have.

    Raises:
        ConfigError: ``unknown columns ['x']; the dataset has ['a', 'b']``.
    """
    missing = [c for c in columns or () if c not in schema.names]
    if missing:
        raise ConfigError(f"unknown columns {missing}; the dataset has {schema.names}")


def unify_permissive(schemas: Sequence[pa.Schema], paths: Sequence[str]) -> pa.Schema:
    """Arrow's permissive unification (int32 and int64 give int64, a missing column is
    null), or a :class:`FormatError` naming the first file whose schema differs (token
    columns of another layout too: :func:`~shardwise._tokens.check_same_tokens`)."""
    if not schemas:
        return pa.schema([])
    check_same_tokens(schemas, paths)
    try:
        return pa.unify_schemas(list(schemas), promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        for schema, path in zip(schemas, paths):
            if not schema.equals(schemas[0]):
                raise FormatError(f"schema does not match the first file's: {exc}", path) from exc
        raise FormatError(f"schemas cannot be unified: {exc}") from exc


class _ReadsUnits(Protocol):
    def read_unit(self, unit: Unit, **kwargs: Any) -> Iterator[pa.RecordBatch]: ...


class TableFromBatches:
    """``read_table`` for formats that decode record by record: the unit's batches from
    ``read_unit`` as one table (``None`` when nothing is left)."""

    def read_table(
        self: _ReadsUnits, unit: Unit, *, use_threads: bool = True, **kwargs: Any
    ) -> pa.Table | None:
        """The unit's rows as one table (see ``read_unit``); ``None`` when empty."""
        got = list(self.read_unit(unit, **kwargs))
        return pa.Table.from_batches(got) if got else None


@dataclass(frozen=True)
class WrittenFile:
    """One committed output file.

    Attributes:
        path: final path or URL (already committed atomically).
        num_rows: rows written.
        num_bytes: file size in bytes.
        checksum: xxh64 hex digest of the file's bytes.
    """

    path: str
    num_rows: int
    num_bytes: int
    checksum: str


class ShardWriter(Protocol):
    """Writes record batches into shards, rolling over at a target size.

    Each shard is written to a temporary name and committed atomically when it is
    full or when the writer closes; ``close()`` returns every committed shard.
    """

    def write(self, batch: pa.RecordBatch) -> None:
        """Append a batch (may commit one or more full shards)."""
        ...

    def close(self) -> list[WrittenFile]:
        """Commit the last shard and return all committed files in order."""
        ...
