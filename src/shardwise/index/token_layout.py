"""Where a token dataset's tokens lie in its files, kept in the dataset index.

A token column written by ``tokenize`` (:mod:`shardwise._tokens`) holds each row group's
tokens as one run of bytes of its file (:mod:`shardwise.formats.parquet.tokenpages`).
When a dataset is indexed (``tokenize``'s run indexes its output when it commits), every
local Parquet file's row groups get their token run's byte offset and token count, for
each token column, every document checked against the ``num_tokens`` column when the file
has one. The
index saves them beside the units (``"tokens"`` in ``_shardwise_index.json``) and reuses
them per file exactly as it reuses the file's units: while its size and fingerprint are
unchanged. A stream then opens with no footer and no count column read, and maps each
file once (:mod:`shardwise.loader.tokens.flatmap`).

The saved form is ``{"version": LAYOUT_VERSION, "counts": {column: count column or
None}, "files": {path: {column: [[offset, tokens], ...]}}}``, one pair per row group.
A file of another layout or one that does not read has an empty entry (not read again
while unchanged), a remote file none; a saved layout of another version is ignored (and
rebuilt). Readers of older indexes ignore the
key.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from shardwise._tokens import TokenInfo
from shardwise.errors import ShardwiseError
from shardwise.formats.parquet.tokenpages import token_span
from shardwise.storage.paths import open_arrow_input

__all__ = ["COUNT_COLUMN", "LAYOUT_VERSION", "layout_for", "layout_units"]

LAYOUT_VERSION = 2  # 2: every document checked against its count
COUNT_COLUMN = "num_tokens"  # what tokenize writes beside its token column
SERIAL_FILES, THREADS = 16, 8  # files laid out on the calling thread; threads beyond

Layout = dict[str, Any]


def _local(path: str) -> bool:
    return "://" not in path or path.startswith("file://")


def _token_columns(schema: pa.Schema) -> dict[str, int]:
    """Top-level token columns and the bytes of one of their ids."""
    out = {}
    for f in schema:
        info = TokenInfo.of(f)
        if info is not None:
            out[f.name] = np.dtype(info.dtype).itemsize
    return out


def _counted(pf: pq.ParquetFile, group: int) -> np.ndarray | None:
    """Row group ``group``'s ``num_tokens`` (None when any is null)."""
    col = pf.read_row_group(group, columns=[COUNT_COLUMN], use_threads=False).column(0)
    if col.null_count:
        return None
    return np.asarray(col.cast(pa.int64()).to_numpy(), np.int64)


def file_layout(
    path: str, columns: dict[str, int], counts: bool, options: dict[str, Any]
) -> dict[str, list[list[int]]] | None:
    """Every row group's ``[offset, tokens]`` of each of ``columns`` in the Parquet file
    ``path`` (checked against ``num_tokens`` when ``counts``), or None when a column is not
    laid out for it or the file does not read so."""
    try:
        source = open_arrow_input(path, **options)
        pf = pq.ParquetFile(source)
        out: dict[str, list[list[int]]] = {}
        for column, itemsize in columns.items():
            spans = []
            for g in range(pf.metadata.num_row_groups):
                counted = _counted(pf, g) if counts else None
                span = token_span(pf, source, g, column, itemsize, counted)
                if span is None or (counts and counted is None):
                    return None
                spans.append([int(span[0]), int(span[1])])
            out[column] = spans
        return out
    except (OSError, ValueError, pa.ArrowException, ShardwiseError):
        return None


def layout_for(index: Any, saved: Any, options: dict[str, Any]) -> tuple[Layout | None, bool]:
    """The token layout of ``index``'s local files (see the module docstring) and whether
    any of it was read now: a file's saved entry is kept while its saved ``FileEntry``
    (size, fingerprint) is the one listed now, else the file is read again."""
    columns = _token_columns(index.schema) if index.format == "parquet" else {}
    if not columns:
        return None, False
    counts = COUNT_COLUMN in index.schema.names
    old = _saved(saved, counts)
    kept = {f.path: f for f in saved.files} if saved else {}
    files: dict[str, Any] = {}
    todo = []
    for f in index.files:
        unchanged = bool(f.fingerprint) and kept.get(f.path) == f
        entry = old.get(f.path) if unchanged else None
        if entry is not None:
            files[f.path] = entry
        elif _local(f.path):
            todo.append(f.path)
    for path, entry in zip(todo, _read_all(todo, columns, counts, options)):
        files[path] = {} if entry is None else entry  # {}: read, not laid out (kept as such)
    counted = {c: COUNT_COLUMN if counts else None for c in columns}
    layout = {"version": LAYOUT_VERSION, "counts": counted, "files": dict(sorted(files.items()))}
    return layout, bool(todo)


def _read_all(
    paths: list[str], columns: dict[str, int], counts: bool, options: dict[str, Any]
) -> list[Any]:
    """:func:`file_layout` of each of ``paths``, on threads when there are many."""
    if len(paths) <= SERIAL_FILES:
        return [file_layout(p, columns, counts, options) for p in paths]
    with ThreadPoolExecutor(THREADS) as pool:
        return list(pool.map(lambda p: file_layout(p, columns, counts, options), paths))


def _saved(saved: Any, counts: bool) -> dict[str, Any]:
    """A saved index's layout by file, when of this version and checked the same way."""
    layout = getattr(saved, "tokens", None)
    if not isinstance(layout, dict) or layout.get("version") != LAYOUT_VERSION:
        return {}
    checked = layout.get("counts") or {}
    if any((v is not None) != counts for v in checked.values()):
        return {}
    files = layout.get("files")
    return files if isinstance(files, dict) else {}


def layout_units(index: Any, column: str, count_column: str | None) -> np.ndarray | None:
    """``[offset, tokens]`` of every unit of ``index`` (a ``DatasetIndex``) as an int64
    ``(units, 2)`` array, or None when its layout lacks a unit, was checked against
    another count column or is malformed."""
    layout = getattr(index, "tokens", None)
    if not isinstance(layout, dict) or layout.get("version") != LAYOUT_VERSION:
        return None
    checked = (layout.get("counts") or {}).get(column, "")
    if checked == "" or (count_column is not None and checked != count_column):
        return None
    files = layout.get("files") or {}
    out = np.empty((len(index.units), 2), dtype=np.int64)
    try:
        for i, u in enumerate(index.units):
            out[i] = files[u.path][column][u.index]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
    return out if len(out) == 0 or (out >= 0).all() else None
