"""Dataset index: every unit of every file with its exact sample count.

``index_dataset(paths)`` lists each path once (sizes and fingerprints come with the
listing), reads only what it needs from each file (Parquet footers, by concurrent ranged
reads of the files' tails; tar headers; JSONL newlines), and returns a
:class:`DatasetIndex`. The index is saved beside the data (``_shardwise_index.json``
in the dataset directory) or, when that is not possible, in a cache directory, and
reused per file only while the file's size and fingerprint (mtime or ETag) match.

May import: ``shardwise.errors``, ``shardwise._optional``, ``shardwise._tokens``,
``shardwise.storage``, ``shardwise.formats`` and ``shardwise.parallel`` (see
``docs/layers.toml``).
"""

from __future__ import annotations

import inspect
import os
import warnings
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any

import pyarrow as pa

from shardwise.formats import (
    OnError,
    Unit,
    check_format_options,
    check_on_error,
    format_class,
    get_format,
)
from shardwise.index.dataset_files import MANIFEST_NAME, choose_format, list_dataset
from shardwise.index.footers import index_parquet
from shardwise.index.model import INDEX_NAME, DatasetIndex, FileEntry
from shardwise.index.store import cache_root, index_location, load_saved, save
from shardwise.index.token_layout import layout_for
from shardwise.storage import FileInfo

__all__ = [
    "INDEX_NAME",
    "MANIFEST_NAME",
    "OPEN_OPTIONS",
    "DatasetIndex",
    "FileEntry",
    "cache_root",
    "index_dataset",
    "open_dataset",
]


def _index_one(
    args: tuple[str, str, int, dict[str, Any], dict[str, Any]],
) -> tuple[list[Unit], pa.Schema]:
    path, fmt_name, size, fmt_options, storage_options = args
    fmt = get_format(fmt_name, storage_options=storage_options, **fmt_options)
    return fmt.list_units(path, size), fmt.read_schema(path)


# index_dataset's own keyword arguments (the rest go to the format)
# the public name a typo is reported against (the deprecated alias names itself)
_CALLER: ContextVar[str] = ContextVar("shardwise_index_caller", default="index_dataset")
OPEN_OPTIONS = ("format", "cache_dir", "refresh", "progress", "storage_options", "on_error")


def index_dataset(
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
        progress: show a progress bar (files and files per second) while indexing.
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
    check_format_options(format, format_options, _CALLER.get(), OPEN_OPTIONS)
    opts = storage_options or {}
    spec = (
        [os.fspath(paths)]
        if isinstance(paths, (str, os.PathLike))
        else [os.fspath(p) for p in paths]
    )
    listed = list_dataset(spec, opts)
    infos = listed.infos
    fmt_name = choose_format([fi.path for fi in infos], format)
    if "on_error" in inspect.signature(format_class(fmt_name)).parameters:
        format_options = {**format_options, "on_error": check_on_error(on_error)}
    location = index_location(spec, fmt_name, format_options, cache_dir, listed.directory)
    unseen = listed.directory and listed.saved_index is None  # the listing shows none
    saved = None if refresh or unseen else load_saved(location, fmt_name, format_options, opts)
    index = _build(fmt_name, infos, saved, format_options, progress, opts)
    index.storage_options = opts
    index.tokens, laid_out = layout_for(index, saved, opts)
    if (
        laid_out
        or index.reused_files < len(infos)
        or saved is None
        or len(saved.files) != len(infos)
    ):
        index.location = save(index, location, format_options, cache_dir, spec, opts)
    else:
        index.location = location
    return index


def open_dataset(*args: Any, **kwargs: Any) -> DatasetIndex:
    """Deprecated alias of :func:`index_dataset` (the name said "open" where the call
    indexes); it warns and will be removed in the next release."""
    warnings.warn(
        "shardwise.open_dataset is deprecated: use shardwise.index_dataset",
        DeprecationWarning,
        stacklevel=2,
    )
    token = _CALLER.set("open_dataset")
    try:
        return index_dataset(*args, **kwargs)
    finally:
        _CALLER.reset(token)


def _build(
    fmt_name: str,
    infos: list[FileInfo],
    saved: DatasetIndex | None,
    format_options: dict[str, Any],
    progress: bool,
    storage_options: dict[str, Any],
) -> DatasetIndex:
    reuse = _reusable(saved, infos)
    todo = [fi for fi in infos if fi.path not in reuse]
    built = dict(
        zip(
            (fi.path for fi in todo),
            _index(fmt_name, todo, format_options, progress, storage_options),
        )
    )
    files, units, schemas = [], [], []
    for fi in infos:
        f_units, schema = reuse[fi.path] if fi.path in reuse else built[fi.path]
        files.append(
            FileEntry(
                fi.path, fi.size, fi.fingerprint, len(f_units), sum(u.num_samples for u in f_units)
            )
        )
        units.extend(f_units)
        schemas.append(schema)
    schema = get_format(fmt_name).unify_schemas(schemas, [fi.path for fi in infos])
    return DatasetIndex(fmt_name, files, units, schema, reused_files=len(reuse))


def _index(
    fmt_name: str,
    todo: list[FileInfo],
    format_options: dict[str, Any],
    progress: bool,
    storage_options: dict[str, Any],
) -> list[tuple[list[Unit], pa.Schema]]:
    """Parquet footers as concurrent reads (:mod:`shardwise.index.footers`), unless a
    backend was chosen with ``parallel_backend``; other formats through ``parallel_map``
    (threads for remote files, whose indexing waits on I/O)."""
    if not todo:  # every file's units reused: nothing to read (or import)
        return []
    from shardwise.parallel import active_backend, parallel_map

    if fmt_name == "parquet" and active_backend() is None:
        get_format(fmt_name, **format_options)  # its options checked as before
        return index_parquet(todo, storage_options, progress)
    args = [(fi.path, fmt_name, fi.size, format_options, storage_options) for fi in todo]
    return parallel_map(
        _index_one,
        args,
        backend=_index_backend(todo),
        desc="index files",
        progress=progress and len(args) > 1,
    )


#: local files (and bytes) up to which an index reads them in the calling thread: a few
#: footers or a newline scan of a few MB take less than starting threads for them
SERIAL_FILES, SERIAL_BYTES = 16, 64 * 2**20


def _index_backend(todo: Sequence[FileInfo]) -> str | None:
    """Where the files to index are read: here for a few small local files, on threads
    for remote files or up to 64 local ones, else on the active backend (or the default
    one)."""
    from shardwise.parallel import active_backend

    if active_backend() is not None:
        return None
    local = all("://" not in fi.path or fi.path.startswith("file://") for fi in todo)
    if local and len(todo) <= SERIAL_FILES and sum(fi.size for fi in todo) <= SERIAL_BYTES:
        return "sequential"
    return "thread" if len(todo) < 64 or not local else None


def _reusable(
    saved: DatasetIndex | None, infos: Iterable[FileInfo]
) -> dict[str, tuple[list[Unit], pa.Schema]]:
    if saved is None:
        return {}
    by_path = {f.path: f for f in saved.files}
    units_by_path: dict[str, list[Unit]] = {}
    for u in saved.units:
        units_by_path.setdefault(u.path, []).append(u)
    out = {}
    for fi in infos:
        old = by_path.get(fi.path)
        if (
            old is not None
            and old.size == fi.size
            and old.fingerprint == fi.fingerprint
            and fi.fingerprint
        ):
            out[fi.path] = (units_by_path.get(fi.path, []), saved.schema)
    return out
