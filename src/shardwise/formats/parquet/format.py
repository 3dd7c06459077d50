"""Parquet: one unit per row group, read with column projection (the rolling shard
writer is :mod:`.writer`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import ConfigError, FormatError, StorageError
from shardwise.formats.contract import (
    OnError,
    Quarantine,
    Unit,
    check_columns,
    suffixes_of,
    unify_permissive,
)
from shardwise.formats.parquet._binarydict import read_binary_dicts
from shardwise.formats.parquet._fixedlist import page_reader_enabled, read_fixed_lists
from shardwise.formats.parquet._footcheck import check_footer
from shardwise.formats.parquet._footer import row_group_units, unreadable
from shardwise.formats.parquet._pagecheck import bad_page
from shardwise.formats.parquet._varlist import read_var_lists
from shardwise.formats.parquet.footers import open_parquet
from shardwise.formats.parquet.writer import ParquetShardWriter
from shardwise.storage import open_arrow_input
from shardwise.storage.recording import RecordingFile, storage_failure

__all__ = ["ParquetFormat", "ParquetShardWriter"]


def _open(path: str, storage_options: dict[str, Any]) -> pq.ParquetFile:
    return _open_with_source(path, storage_options)[0]


def _open_with_source(path: str, storage_options: dict[str, Any]) -> tuple[pq.ParquetFile, Any]:
    f = open_arrow_input(path, **storage_options)
    if not isinstance(f, pa.NativeFile):  # a Python file: its own failures are told apart
        f = RecordingFile(f)
    try:
        return open_parquet(path, f), f
    except Exception as exc:
        f.close()
        _raise_storage(exc, f, path, "footer")
        if not isinstance(exc, (pa.ArrowException, OSError, UnicodeDecodeError)):
            raise
        raise FormatError(
            f"not a readable Parquet file ({unreadable(exc)})", path, "footer"
        ) from exc


def _footer(source: Any, size: int) -> bytes:
    """The Thrift footer of the Parquet file open as ``source`` (Arrow parsed it already)."""
    source.seek(size - 8)
    n = int.from_bytes(source.read(8)[:4], "little")
    source.seek(max(0, size - 8 - n))
    return bytes(source.read(min(n, size - 8)))


def _raise_storage(exc: BaseException, source: Any, path: str, where: str) -> None:
    """Raise a ``StorageError`` naming ``path`` if what failed was reading ``source`` (a
    dropped connection, not a bad file: the caller retries it when the cause is
    transient); return when the failure is the bytes' own."""
    failed = storage_failure(source)
    if failed is not None:
        raise StorageError(
            f"cannot read {path} ({where}): {type(failed).__name__}: {failed}", path
        ) from failed


class ParquetFormat:
    """Parquet files; a unit is a row group.

    Args:
        batch_rows: rows per yielded record batch.
        storage_options: fsspec options for remote paths.
    """

    name = "parquet"
    extensions = suffixes_of("parquet")

    def __init__(
        self, batch_rows: int = 65536, storage_options: dict[str, Any] | None = None
    ) -> None:
        if batch_rows < 1:
            raise ConfigError(f"batch_rows must be >= 1, got {batch_rows}")
        self.batch_rows = batch_rows
        self.storage_options = storage_options or {}

    def list_units(self, path: str, size: int) -> list[Unit]:
        """One unit per row group, from the footer only."""
        pf, source = _open_with_source(path, self.storage_options)
        try:
            sizes = check_footer(_footer(source, size), path)
            return row_group_units(pf.metadata, path, size, sizes)
        finally:
            pf.close()

    def read_schema(self, path: str) -> pa.Schema:
        """The file's Arrow schema (from the footer)."""
        pf = _open(path, self.storage_options)
        try:
            return pf.schema_arrow
        finally:
            pf.close()

    def read_unit(
        self,
        unit: Unit,
        *,
        columns: Sequence[str] | None = None,
        on_error: OnError = "raise",
        quarantine: Quarantine | None = None,
        schema: pa.Schema | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the row group's rows; a corrupt row group is an error naming it.

        A row group that cannot be decoded is a whole-unit failure: under
        ``on_error="skip"`` its rows are quarantined (counted) and nothing is yielded.
        """
        table = self.read_table(
            unit, columns=columns, on_error=on_error, quarantine=quarantine, schema=schema
        )
        if table is not None:
            yield from table.to_batches(max_chunksize=self.batch_rows)

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
        """The row group as one table as decoded (usually one chunk per column, so no
        copy is needed to make it contiguous); ``None`` when it was quarantined.
        ``use_threads=False`` decodes on the calling thread only (for callers that
        already read several units at once)."""
        pf, source = _open_with_source(unit.path, self.storage_options)
        try:
            check_columns(columns, schema if schema is not None else pf.schema_arrow)
            try:
                table = _read_row_group(pf, source, unit.index, columns, use_threads)
                _check_rows(table, unit)
            except Exception as exc:
                # bytes already read that do not decode are the file's damage, whatever the
                # message says (a snappy page of 503 bytes is no throttled request)
                _raise_storage(exc, source, unit.path, f"row group {unit.index}")
                if not isinstance(exc, (pa.ArrowException, OSError, IndexError)):
                    raise  # a bug, not the file's damage
                what = _failing_column(pf, source, unit.index, columns)
                err = FormatError(
                    f"cannot decode {what} ({exc})",
                    unit.path,
                    f"row group {unit.index}",
                )
                if on_error == "skip" and quarantine is not None:
                    quarantine.add(
                        unit.path,
                        f"row group {unit.index}",
                        f"{err.reason} ({unit.num_samples} rows)",
                        count=unit.num_samples,
                    )
                    return None
                raise err from exc
        finally:
            pf.close()
        return _conform(table, schema, columns, unit) if schema is not None else table

    def unify_schemas(self, schemas: Sequence[pa.Schema], paths: Sequence[str]) -> pa.Schema:
        """One schema for the dataset's files (Arrow's permissive unification)."""
        return unify_permissive(schemas, paths)

    def open_writer(self, prefix: str, **options: Any) -> ParquetShardWriter:
        """Return a rolling writer of ``{prefix}-{n:05d}.parquet`` shards."""
        return ParquetShardWriter(prefix, storage_options=self.storage_options, **options)


def _check_rows(table: pa.Table, unit: Unit) -> None:
    """Refuse a row group that decodes to other rows than its footer counts (the plan
    addresses the footer's rows): a damage like any decoding error."""
    if table.num_columns and table.num_rows != unit.num_samples:
        raise pa.ArrowInvalid(
            f"{table.num_rows} rows decoded where the footer counts {unit.num_samples}"
        )


def _failing_column(
    pf: pq.ParquetFile, source: Any, group: int, columns: Sequence[str] | None
) -> str:
    """The first column Arrow cannot read alone, as "column 'name'" and, where one is, its
    first page that does not decompress (after a failed read of the row group: the
    error's message rarely names either), or "row group" when no column fails alone."""
    for name in list(columns) if columns is not None else pf.schema_arrow.names:
        try:
            pf.read_row_group(group, columns=[name], use_threads=False)
        except (pa.ArrowException, OSError, IndexError):
            page = bad_page(pf, source, group, name)
            return f"column {name!r}" + (f" ({page})" if page else "")
    return "row group"


def _read_row_group(
    pf: pq.ParquetFile, source: Any, group: int, columns: Sequence[str] | None, use_threads: bool
) -> pa.Table:
    """Row group ``group``: lists of numbers without nulls and wide binary values decoded
    from their pages (:func:`_from_pages`), the other columns by Arrow."""
    names = list(columns) if columns is not None else pf.schema_arrow.names
    plain = len(set(names)) == len(names) and set(names) <= set(
        pf.schema_arrow.names
    )  # else as Arrow has it
    # the one switch of the page reader (SHARDWISE_PAGE_READER=0): the pipeline's reads
    # (read_unit) and the loader's (read_table) both come here
    fixed = _from_pages(pf, source, group, names) if plain and page_reader_enabled() else {}
    if not fixed:
        return pf.read_row_group(
            group, columns=list(columns) if columns is not None else None, use_threads=use_threads
        )
    rest = [n for n in names if n not in fixed]
    table = pf.read_row_group(group, columns=rest, use_threads=use_threads) if rest else None
    schema = pf.schema_arrow
    arrays = [fixed[n] if n in fixed else table.column(n) for n in names]  # type: ignore[union-attr]
    return pa.Table.from_arrays(
        arrays, schema=pa.schema([schema.field(n) for n in names], metadata=schema.metadata)
    )


def _from_pages(pf: pq.ParquetFile, source: Any, group: int, names: list[str]) -> dict[str, Any]:
    """The columns of ``names`` the page readers decode: fixed-size lists of numbers
    (:mod:`~shardwise.formats.parquet._fixedlist`), lists of numbers of any length
    (:mod:`~shardwise.formats.parquet._varlist`), then wide binary values
    (:mod:`~shardwise.formats.parquet._binarydict`)."""
    out = read_fixed_lists(pf, source, group, names)
    for reader in (read_var_lists, read_binary_dicts):
        others = [n for n in names if n not in out]
        if others:
            out |= reader(pf, source, group, others)
    return out


def _conform(
    table: pa.Table, schema: pa.Schema, columns: Sequence[str] | None, unit: Unit
) -> pa.Table:
    names = list(columns) if columns is not None else schema.names
    have = set(schema.names)
    target = pa.schema([schema.field(n) for n in names if n in have])
    if table.schema.equals(target):
        return table
    arrays = []
    for field in target:
        if field.name in table.column_names:
            col = table.column(field.name)
            try:
                arrays.append(col.cast(field.type) if col.type != field.type else col)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise FormatError(
                    f"column {field.name!r} cannot be cast to {field.type}: {exc}",
                    unit.path,
                    f"row group {unit.index}",
                ) from exc
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=target)
