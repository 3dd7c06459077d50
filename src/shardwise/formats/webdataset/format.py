"""WebDataset tar shards: samples grouped by key, one unit per tar file.

Rows have a ``__key__`` string column and one binary column per field (the member
name after the key: ``0001.jpg`` -> field ``jpg``), null where a sample lacks it.
Counting reads only tar headers (member data are skipped with seeks; a remote tar is
read whole, in large ranges fetched several at once). A plain tar's batches are built
straight from its member bytes (:mod:`._arrays`), anything unusual through tarfile. Unsafe
members (absolute paths, ``..``, links, devices, FIFOs) raise UnsafeMemberError,
or under ``on_error="skip"`` the sample holding them is quarantined and counted. A
plain tar cut short or damaged past its first header is an error naming the place, or
under ``"skip"`` its samples before the damage are kept and the rest is one bad sample.
"""

from __future__ import annotations

import io
import json
import tarfile
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
    unify_permissive,
)
from shardwise.formats.webdataset._arrays import buildable, plain_batches
from shardwise.formats.webdataset._plainwalk import scan, usable
from shardwise.formats.webdataset._tarsafe import RawSample, is_compressed, iter_samples, unsafe
from shardwise.storage import open_input, open_sequential, read_locally

__all__ = ["WebDatasetFormat", "WebDatasetShardWriter"]

KEY = "__key__"


class WebDatasetFormat(TableFromBatches):
    """WebDataset ``.tar`` shards.

    Args:
        batch_rows: samples per yielded record batch.
        storage_options: fsspec options for remote paths.
        on_error: what indexing does with a bad sample (an unsafe member, a key whose
            members are not adjacent, a field twice): ``"raise"`` names the file and the
            member; ``"skip"`` leaves it out of the counts (reading quarantines it).
    """

    name = "webdataset"
    extensions = suffixes_of("webdataset")

    def __init__(
        self,
        batch_rows: int = 1024,
        storage_options: dict[str, Any] | None = None,
        on_error: OnError = "raise",
    ) -> None:
        if batch_rows < 1:
            raise ConfigError(f"batch_rows must be >= 1, got {batch_rows}")
        self.batch_rows = batch_rows
        self.storage_options = storage_options or {}
        self.on_error = check_on_error(on_error)
        self._fields: dict[str, list[str]] = {}  # per shard, from list_units until read_schema

    def list_units(self, path: str, size: int) -> list[Unit]:
        """One unit per tar; counts the samples reading will yield, checking every header
        (a bad sample is an error naming the member, or left out under ``"skip"``)."""
        n, bad, fields = self._scan(path, refuse=self.on_error == "raise", size=size)
        self._fields[path] = fields  # read_schema, called next while indexing, needs no second pass
        return [Unit(path, 0, n, size, 0, size, 0, skipped=bad)]

    def _scan(self, path: str, refuse: bool, size: int | None = None) -> tuple[int, int, list[str]]:
        """Every header of the shard: good samples, bad ones (an error if ``refuse``) and
        the good samples' fields. A remote shard is read whole, in large blocks fetched
        several at a time (its headers are spread over all of it)."""
        n = bad = 0
        fields: dict[str, None] = {}
        with open_sequential(path, size, **self.storage_options) as f:
            plain = scan(f) if not is_compressed(path) and usable() else None
            if plain is not None:
                return plain[0], 0, plain[1]
            f.seek(0)
            for sample in iter_samples(path, f, tolerate=not refuse):
                if sample.problem is None:
                    n += 1
                    fields.update(dict.fromkeys(sample.fields))
                elif refuse:
                    raise _problem(path, sample)
                else:
                    bad += 1
        return n, bad, sorted(fields)

    def read_schema(self, path: str) -> pa.Schema:
        """``__key__`` plus a binary column per field any good sample of the shard has
        (every header is read: a field first seen late in a shard is a column too)."""
        fields = self._fields.pop(path, None)
        if fields is None:
            fields = self._scan(path, refuse=False)[2]
        return pa.schema([pa.field(KEY, pa.string())] + [pa.field(k, pa.binary()) for k in fields])

    def read_unit(
        self,
        unit: Unit,
        *,
        columns: Sequence[str] | None = None,
        on_error: OnError = "raise",
        quarantine: Quarantine | None = None,
        schema: pa.Schema | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """Yield the tar's samples in order, ``batch_rows`` at a time (a plain tar's
        common case, on this machine or served from a node cache, straight from member
        bytes: see :mod:`._arrays`; a remote one uncached streams through tarfile)."""
        q = quarantine if quarantine is not None else Quarantine()
        schema = schema if schema is not None else self.read_schema(unit.path)
        check_columns(columns, schema)
        names = [KEY] + [c for c in (columns if columns is not None else schema.names) if c != KEY]
        out_schema = pa.schema([schema.field(c) for c in names])
        done = 0
        if not is_compressed(unit.path) and read_locally(unit.path) and buildable(out_schema):
            with open_input(unit.path, **self.storage_options) as f:
                for batch in plain_batches(unit.path, f, out_schema, self.batch_rows):
                    if batch is None:
                        break
                    done += batch.num_rows
                    yield batch
                else:
                    return
        yield from self._read_tarfile(unit.path, names, out_schema, on_error, q, done)

    def _read_tarfile(
        self,
        path: str,
        names: list[str],
        out_schema: pa.Schema,
        on_error: OnError,
        q: Quarantine,
        done: int,
    ) -> Iterator[pa.RecordBatch]:
        """Any tar through tarfile, past the first ``done`` good samples (already yielded)."""
        rows: list[dict[str, Any]] = []
        with open_input(path, **self.storage_options) as f:
            data = _DataReader(path, f)
            for sample in iter_samples(path, f, keep_data=True, tolerate=on_error == "skip"):
                row = self._row(path, sample, names, data, on_error, q)
                if row is not None and done:
                    done -= 1
                elif row is not None:
                    rows.append(row)
                if len(rows) >= self.batch_rows:
                    yield pa.RecordBatch.from_pylist(rows, schema=out_schema)
                    rows = []
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=out_schema)

    def _row(
        self,
        path: str,
        s: RawSample,
        names: list[str],
        data: _DataReader,
        on_error: OnError,
        q: Quarantine,
    ) -> dict[str, Any] | None:
        if s.problem is not None:
            if on_error == "raise":
                raise _problem(path, s)
            q.add(path, s.where(), s.problem)
            return None
        row: dict[str, Any] = {KEY: s.key}
        for name in names[1:]:
            m = s.fields.get(name)
            row[name] = None if m is None else s.data[name] if name in s.data else data.read(m)
        return row

    def unify_schemas(self, schemas: Sequence[pa.Schema], paths: Sequence[str]) -> pa.Schema:
        """``__key__`` and every field any shard has (all binary)."""
        return unify_permissive(schemas, paths)

    def open_writer(self, prefix: str, **options: Any) -> WebDatasetShardWriter:
        """Return a rolling writer of ``{prefix}-{n:05d}.tar`` shards."""
        return WebDatasetShardWriter(prefix, storage_options=self.storage_options, **options)


def _problem(path: str, s: RawSample) -> FormatError:
    """The error for a bad sample: unsafe members name the member, others the key."""
    if s.unsafe:
        return unsafe(path, s)
    return FormatError(s.problem or "bad sample", path, s.where())


class _DataReader:
    """Reads member data by offset from the same file the headers came from."""

    def __init__(self, path: str, f: Any) -> None:
        self.path = path
        self.f = f

    def read(self, m: tarfile.TarInfo) -> bytes:
        pos = self.f.tell()
        self.f.seek(m.offset_data)
        data = self.f.read(m.size)
        self.f.seek(pos)
        if len(data) != m.size:
            raise FormatError(
                f"truncated member data ({len(data)} of {m.size} bytes)",
                self.path,
                f"member {m.name}",
            )
        return bytes(data)


def _encode(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bool, int, float)):
        return json.dumps(value).encode()
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


class WebDatasetShardWriter(RollingWriter):
    """Writes tar shards; a sample's members are never split across shards.

    A batch needs a ``__key__`` column; every other non-null value becomes the
    member ``{key}.{column}``: bytes as they are, strings as UTF-8, numbers and
    booleans as their JSON text, lists/structs as compact JSON. A row whose fields
    are all null has no member to write (a tar cannot hold an empty sample), so it
    is a ValueError rather than a row silently lost. Headers are fixed (mtime 0,
    uid/gid 0, no user names, mode 0644), so equal input gives equal bytes.
    """

    def __init__(
        self,
        prefix: str,
        *,
        target_shard_bytes: int = 256 * 2**20,
        storage_options: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(prefix, "tar", target_shard_bytes, storage_options)
        self._tar: tarfile.TarFile | None = None

    def write(self, batch: pa.RecordBatch) -> None:
        """Write samples one at a time so rollover happens between samples."""
        if KEY not in batch.schema.names:
            raise FormatError(
                f"a WebDataset batch needs a {KEY!r} column; got {batch.schema.names}"
            )
        for i in range(batch.num_rows):
            super().write(batch.slice(i, 1))

    def _start(self) -> None:
        self._tar = tarfile.open(  # noqa: SIM115 - closed by _finish
            fileobj=self._buf, mode="w", format=tarfile.USTAR_FORMAT
        )

    def _append(self, batch: pa.RecordBatch) -> None:
        assert self._tar is not None
        row = batch.to_pylist()[0]
        key = row.pop(KEY)
        if not key or not isinstance(key, str):
            raise FormatError(f"{KEY} must be a non-empty string, got {key!r}")
        if all(value is None for value in row.values()):
            raise FormatError(
                f"sample {key!r} has no non-null field; a WebDataset sample needs at least one "
                "member"
            )
        for name, value in row.items():
            if value is None:
                continue
            payload = _encode(value)
            info = tarfile.TarInfo(f"{key}.{name}")
            info.size, info.mtime, info.mode = len(payload), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            self._tar.addfile(info, io.BytesIO(payload))

    def _finish(self) -> bytes:
        assert self._tar is not None and self._buf is not None
        self._tar.close()
        self._tar = None
        return self._buf.getvalue()
