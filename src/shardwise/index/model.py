"""The index of a dataset: its files and every unit with its exact sample count."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.errors import FormatError
from shardwise.formats import (
    Unit,
)

__all__ = ["INDEX_NAME", "INDEX_VERSION", "DatasetIndex", "FileEntry"]

INDEX_NAME = "_shardwise_index.json"
INDEX_VERSION = 2  # 2: footers checked (a row group with fewer values than rows refused)


@dataclass(frozen=True)
class FileEntry:
    """One data file of a dataset.

    Attributes:
        path: URL or local path.
        size: bytes.
        fingerprint: mtime or ETag when indexed.
        num_units: units the file was cut into.
        num_samples: samples in the file.
    """

    path: str
    size: int
    fingerprint: str
    num_units: int
    num_samples: int


@dataclass
class DatasetIndex:
    """Units of a dataset with exact counts, its schema and totals.

    Attributes:
        format: format name (``parquet``, ``jsonl`` or ``webdataset``).
        files: the data files, in the stable order of :func:`shardwise.storage.expand`.
        units: every unit, file by file, in file order.
        schema: the dataset-wide Arrow schema.
        location: where the index was saved (empty if it could not be saved).
        reused_files: how many files' entries came from a saved index.
    """

    format: str
    files: list[FileEntry]
    units: list[Unit]
    schema: pa.Schema
    location: str = ""
    reused_files: int = field(default=0, compare=False)
    #: where each local file's tokens lie (:mod:`shardwise.index.token_layout`), or None
    tokens: dict[str, Any] | None = field(default=None, compare=False, repr=False)
    #: fsspec options used to open the files; kept in memory only, never saved
    storage_options: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def num_units(self) -> int:
        """Number of units."""
        return len(self.units)

    @property
    def num_samples(self) -> int:
        """Total samples."""
        return sum(u.num_samples for u in self.units)

    @property
    def num_bytes(self) -> int:
        """Total bytes of the data files."""
        return sum(f.size for f in self.files)

    def counts(self) -> np.ndarray:
        """Samples per unit as an int64 array (the input of ``shardwise.plan``)."""
        return np.fromiter(
            (u.num_samples for u in self.units), dtype=np.int64, count=len(self.units)
        )

    def summary(self) -> dict[str, Any]:
        """Totals and the smallest/largest unit, as plain values (``skipped``: bad samples
        left out of ``samples`` while indexing under ``on_error="skip"``)."""
        counts = self.counts()
        out: dict[str, Any] = {
            "format": self.format,
            "files": len(self.files),
            "units": self.num_units,
            "samples": self.num_samples,
            "skipped": sum(u.skipped for u in self.units),
            "bytes": self.num_bytes,
            "columns": self.schema.names,
        }
        if len(counts):
            lo, hi = int(np.argmin(counts)), int(np.argmax(counts))
            out["smallest_unit"] = _unit_desc(self.units[lo])
            out["largest_unit"] = _unit_desc(self.units[hi])
            out["mean_samples_per_unit"] = float(counts.mean())
        return out

    def to_json(self) -> str:
        """Serialise the index (schema as base64 Arrow IPC)."""
        schema = base64.b64encode(self.schema.serialize().to_pybytes()).decode()
        out = {
            "version": INDEX_VERSION,
            "format": self.format,
            "schema": schema,
            # field by field: asdict deep-copies every value (~0.2 ms a file)
            "files": [_row(f, _FILE_FIELDS) for f in self.files],
            "units": [list(_row(u, _UNIT_FIELDS).values()) for u in self.units],
        }
        if self.tokens is not None:  # optional: readers that do not know it ignore it
            out["tokens"] = self.tokens
        return json.dumps(out, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> DatasetIndex:
        """Inverse of :meth:`to_json`."""
        d = json.loads(text)
        if d.get("version") != INDEX_VERSION:
            raise FormatError(f"unsupported index version {d.get('version')}", INDEX_NAME)
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(d["schema"])))
        return cls(
            format=d["format"],
            files=[FileEntry(**f) for f in d["files"]],
            units=[Unit(*u) for u in d["units"]],
            schema=schema,
            tokens=d.get("tokens") if isinstance(d.get("tokens"), dict) else None,
        )


_FILE_FIELDS = tuple(f.name for f in fields(FileEntry))
_UNIT_FIELDS = tuple(f.name for f in fields(Unit))


def _row(value: Any, names: tuple[str, ...]) -> dict[str, Any]:
    return {n: getattr(value, n) for n in names}


def _unit_desc(u: Unit) -> dict[str, Any]:
    return {"path": u.path, "unit": u.index, "samples": u.num_samples, "bytes": u.num_bytes}
