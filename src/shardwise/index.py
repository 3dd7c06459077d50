"""Dataset index: every unit of every file with its exact sample count.

``open_dataset(paths)`` expands paths and globs, reads only what it needs from each
file (Parquet footers, tar headers, JSONL newlines), and returns a
:class:`DatasetIndex`. The index is saved beside the data (``_shardwise_index.json``
in the dataset directory) or, when that is not possible, in a cache directory, and
reused per file only while the file's size and fingerprint (mtime or ETag) match.
"""

from __future__ import annotations

import base64
import hashlib
import inspect
import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.errors import FormatError, StorageError
from shardwise.formats import (
    OnError,
    Unit,
    check_format_options,
    check_on_error,
    detect_format,
    format_class,
    get_format,
    guess_format,
)
from shardwise.storage import FileInfo, atomic_write, expand, info, join, open_input, resolve

INDEX_NAME = "_shardwise_index.json"
INDEX_VERSION = 1

__all__ = ["DatasetIndex", "FileEntry", "open_dataset"]


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
        return np.fromiter((u.num_samples for u in self.units), dtype=np.int64, count=len(self.units))

    def summary(self) -> dict[str, Any]:
        """Totals and the smallest/largest unit, as plain values."""
        counts = self.counts()
        out: dict[str, Any] = {
            "format": self.format,
            "files": len(self.files),
            "units": self.num_units,
            "samples": self.num_samples,
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
        return json.dumps(
            {
                "version": INDEX_VERSION,
                "format": self.format,
                "schema": schema,
                "files": [asdict(f) for f in self.files],
                "units": [list(asdict(u).values()) for u in self.units],
            },
            separators=(",", ":"),
        )

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
        )


def _unit_desc(u: Unit) -> dict[str, Any]:
    return {"path": u.path, "unit": u.index, "samples": u.num_samples, "bytes": u.num_bytes}


def _index_one(args: tuple[str, str, int, dict[str, Any], dict[str, Any]]) -> tuple[list[Unit], pa.Schema]:
    path, fmt_name, size, fmt_options, storage_options = args
    fmt = get_format(fmt_name, storage_options=storage_options, **fmt_options)
    return fmt.list_units(path, size), fmt.read_schema(path)


# open_dataset's own keyword arguments (the rest go to the format)
OPEN_OPTIONS = ("format", "cache_dir", "refresh", "progress", "storage_options", "on_error")


def open_dataset(
    paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    format: str | None = None,
    *,
    cache_dir: str | None = None,
    refresh: bool = False,
    progress: bool = True,
    storage_options: dict[str, Any] | None = None,
    on_error: OnError = "raise",
    **format_options: Any,
) -> DatasetIndex:
    """Index a dataset: expand paths/globs and count the samples of every unit.

    Args:
        paths: a file, directory, glob or URL, or a list of them.
        format: ``"parquet"``, ``"jsonl"`` or ``"webdataset"``; detected from file
            suffixes when omitted (all files must then share one format).
        cache_dir: where to keep the index when it cannot be saved beside the data
            (default ``$SHARDWISE_CACHE_DIR`` or ``~/.cache/shardwise``).
        refresh: ignore any saved index and re-read every file.
        progress: show a progress bar while indexing.
        storage_options: fsspec options (credentials, endpoint) for remote paths.
        on_error: for formats that find bad records while indexing (WebDataset: unsafe
            members, keys whose members are not adjacent), ``"raise"`` refuses the file
            naming it and the member, ``"skip"`` leaves those samples out of the counts.
        **format_options: passed to the format, e.g. ``unit_bytes`` for JSONL.

    Returns:
        The :class:`DatasetIndex`.

    Raises:
        EmptyDatasetError: nothing matched ``paths``.
        FormatError: unknown or mixed formats, or a file that cannot be indexed.
    """
    check_format_options(format, format_options, "open_dataset", OPEN_OPTIONS)
    opts = storage_options or {}
    spec = [os.fspath(paths)] if isinstance(paths, (str, os.PathLike)) else [os.fspath(p) for p in paths]
    files = _expand_with_manifests(spec, opts)
    fmt_name = _choose_format(files, format)
    if "on_error" in inspect.signature(format_class(fmt_name)).parameters:
        format_options = {**format_options, "on_error": check_on_error(on_error)}
    infos = _file_infos(files, opts)
    location = _index_location(spec, fmt_name, format_options, cache_dir, opts)
    saved = None if refresh else _load_saved(location, fmt_name, format_options, opts)
    index = _build(fmt_name, infos, saved, format_options, progress, opts)
    index.storage_options = opts
    if index.reused_files < len(infos) or saved is None or len(saved.files) != len(infos):
        index.location = _save(index, location, format_options, cache_dir, spec, opts)
    else:
        index.location = location
    return index


MANIFEST_NAME = "_manifest.json"


def _expand_with_manifests(spec: list[str], opts: dict[str, Any]) -> list[str]:
    """Expand paths; a directory holding a committed pipeline manifest contributes exactly
    the files the manifest lists (never a glob, which could pick up stray files)."""
    out: list[str] = []
    for item in spec:
        manifest = join(item, MANIFEST_NAME)
        try:
            with open_input(manifest, **opts) as f:
                listed = json.loads(f.read())["files"]
        except (FileNotFoundError, StorageError, NotADirectoryError, IsADirectoryError):
            _refuse_unfinished(item, opts)
            out.extend(expand(item, **opts))
            continue
        except (ValueError, KeyError) as exc:
            raise FormatError(f"unreadable manifest ({exc})", manifest) from exc
        out.extend(join(item, entry["path"]) for entry in listed)
    return out


def _refuse_unfinished(item: str, opts: dict[str, Any]) -> None:
    """A directory that a pipeline is still writing (or crashed writing) has ``_work/``
    and no manifest yet: reading its files would trust an unfinished output."""
    if any(ch in item for ch in "*?["):
        return
    try:
        fs, path = resolve(join(item, "_work", "out", "_work", "pipeline.json"), **opts)
        unfinished = fs.exists(path)
    except (OSError, ValueError):
        return
    if unfinished:
        raise StorageError(f"{item} is the output of an unfinished shardwise run (no {MANIFEST_NAME} yet); "
                           "rerun the pipeline to finish it", item)


def _choose_format(files: list[str], format: str | None) -> str:
    if format is not None:
        name = get_format(format).name
        for f in files:  # a file whose suffix names another format is not read as this one
            other = guess_format(f)
            if other is not None and other != name:
                raise FormatError(f"format={format!r} was given, but this is a {other} file by its name; "
                                  f"drop format= or pass format={other!r}", f)
        return name
    found: dict[str, str] = {}
    for f in files:
        found.setdefault(detect_format(f), f)
    if len(found) > 1:
        shown = ", ".join(f"{k} ({v})" for k, v in found.items())
        raise FormatError(f"the paths mix formats: {shown}; pass format=... or narrow the glob")
    return next(iter(found))


def _file_infos(files: list[str], opts: dict[str, Any]) -> list[FileInfo]:
    from shardwise.parallel import parallel_map

    if len(files) < 64:
        return [info(f, **opts) for f in files]
    return parallel_map(lambda f: info(f, **opts), files, backend="thread", desc="stat files")


def _cache_root(cache_dir: str | None) -> str:
    root = cache_dir or os.environ.get("SHARDWISE_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "shardwise"
    )
    return os.path.join(root, "index")


def _spec_key(spec: list[str], fmt: str, format_options: dict[str, Any]) -> str:
    text = json.dumps([spec, fmt, sorted(format_options.items())], default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:20]


def _index_location(
    spec: list[str], fmt: str, format_options: dict[str, Any], cache_dir: str | None, opts: dict[str, Any]
) -> str:
    if len(spec) == 1:
        fs, path = resolve(spec[0], **opts)
        try:
            if fs.isdir(path):
                return join(spec[0], INDEX_NAME)
        except OSError:
            pass
    return os.path.join(_cache_root(cache_dir), _spec_key(spec, fmt, format_options) + ".json")


def _load_saved(
    location: str, fmt: str, format_options: dict[str, Any], opts: dict[str, Any]
) -> DatasetIndex | None:
    try:
        with open_input(location, **opts) as f:
            payload = json.loads(f.read())
        if payload.get("format_options") != json.loads(json.dumps(format_options, default=str)):
            return None
        saved = DatasetIndex.from_json(payload["index"])
    except (StorageError, OSError, ValueError, KeyError, TypeError):
        return None
    return saved if saved.format == fmt else None


def _save(
    index: DatasetIndex,
    location: str,
    format_options: dict[str, Any],
    cache_dir: str | None,
    spec: list[str],
    opts: dict[str, Any],
) -> str:
    payload = json.dumps(
        {"format_options": json.loads(json.dumps(format_options, default=str)), "index": index.to_json()}
    )
    fallback = os.path.join(_cache_root(cache_dir), _spec_key(spec, index.format, format_options) + ".json")
    for target in dict.fromkeys([location, fallback]):
        try:
            with atomic_write(target, "w", **(opts if "://" in target else {})) as f:
                f.write(payload)
            return target
        except (OSError, StorageError):
            continue
    return ""


def _build(
    fmt_name: str,
    infos: list[FileInfo],
    saved: DatasetIndex | None,
    format_options: dict[str, Any],
    progress: bool,
    storage_options: dict[str, Any],
) -> DatasetIndex:
    from shardwise.parallel import parallel_map

    reuse = _reusable(saved, infos)
    todo = [fi for fi in infos if fi.path not in reuse]
    args = [(fi.path, fmt_name, fi.size, format_options, storage_options) for fi in todo]
    from shardwise.parallel import active_backend

    backend = "thread" if len(args) < 64 and active_backend() is None else None
    fresh = parallel_map(_index_one, args, backend=backend, desc="index files", progress=progress and len(args) > 1)
    built = dict(zip((fi.path for fi in todo), fresh))
    files, units, schemas = [], [], []
    for fi in infos:
        f_units, schema = reuse[fi.path] if fi.path in reuse else built[fi.path]
        files.append(FileEntry(fi.path, fi.size, fi.fingerprint, len(f_units), sum(u.num_samples for u in f_units)))
        units.extend(f_units)
        schemas.append(schema)
    return DatasetIndex(fmt_name, files, units, _unify(schemas, infos), reused_files=len(reuse))


def _reusable(saved: DatasetIndex | None, infos: Iterable[FileInfo]) -> dict[str, tuple[list[Unit], pa.Schema]]:
    if saved is None:
        return {}
    by_path = {f.path: f for f in saved.files}
    units_by_path: dict[str, list[Unit]] = {}
    for u in saved.units:
        units_by_path.setdefault(u.path, []).append(u)
    out = {}
    for fi in infos:
        old = by_path.get(fi.path)
        if old is not None and old.size == fi.size and old.fingerprint == fi.fingerprint and fi.fingerprint:
            out[fi.path] = (units_by_path.get(fi.path, []), saved.schema)
    return out


def _unify(schemas: list[pa.Schema], infos: list[FileInfo]) -> pa.Schema:
    if not schemas:
        return pa.schema([])
    try:
        return pa.unify_schemas(schemas, promote_options="permissive")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as exc:
        first = schemas[0]
        for s, fi in zip(schemas, infos):
            if not s.equals(first):
                raise FormatError(f"schema does not match the first file's: {exc}", fi.path) from exc
        raise FormatError(f"schemas cannot be unified: {exc}") from exc
