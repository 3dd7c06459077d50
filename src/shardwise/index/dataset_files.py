"""Which files a dataset is: paths and globs expanded (one listing each, which also gives
every file's size and fingerprint), a committed output's manifest trusted over a glob,
an unfinished output refused, and the format chosen."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from typing import Any

from shardwise.errors import EmptyDatasetError, FormatError, StorageError
from shardwise.formats import (
    detect_format,
    get_format,
    guess_format,
)
from shardwise.index.model import INDEX_NAME
from shardwise.storage import FileInfo, info, join, named, resolve, with_retries
from shardwise.storage.listing import Listing, data_files, fingerprint_of, list_path
from shardwise.storage.paths import unstrip

__all__ = ["MANIFEST_NAME", "Listed", "choose_format", "list_dataset"]

MANIFEST_NAME = "_manifest.json"


@dataclass
class Listed:
    """The files of a dataset and what their listing showed.

    Attributes:
        infos: every data file with its size and fingerprint, in the stable order.
        directory: the dataset is one directory (its index is saved inside it).
        saved_index: the listing's details of that directory's saved index, or None
            when the directory has none (or the dataset is not one directory).
    """

    infos: list[FileInfo]
    directory: bool = False
    saved_index: dict[str, Any] | None = None


def list_dataset(spec: list[str], opts: dict[str, Any]) -> Listed:
    """List each path once (a directory: one recursive listing, which also shows its
    manifest, an unfinished run and a saved index) and take sizes and fingerprints from
    the listing; a directory holding a committed pipeline manifest contributes exactly
    the files the manifest lists (never a glob, which could pick up stray files).

    Raises:
        EmptyDatasetError: nothing matched.
        StorageError: an unfinished output, no credentials, access denied.
    """
    out: list[FileInfo] = []
    empty_outputs: list[str] = []  # committed outputs whose manifest lists no file
    refreshed: list[Any] = []
    listed = Listed(out)
    for item in spec:
        fs, path = resolve(item, **opts)
        if not any(fs is seen for seen in refreshed):  # listings are always fresh
            fs.invalidate_cache()
            refreshed.append(fs)
        with named(item):
            found, is_dir = list_path(fs, path, item)
        root = path.rstrip("/")
        if len(spec) == 1 and is_dir:
            listed.directory, listed.saved_index = True, found.get(f"{root}/{INDEX_NAME}")
        if is_dir and f"{root}/{MANIFEST_NAME}" in found:
            files = _from_manifest(item, root, found, opts)
            out.extend(files)
            empty_outputs += [] if files else [item]
            continue
        if is_dir and f"{root}/{_UNFINISHED}" in found:
            raise StorageError(
                f"{item} is the output of an unfinished shardwise run (no {MANIFEST_NAME} "
                "yet); rerun the pipeline to finish it",
                item,
            )
        for f in data_files(found, is_dir, path):
            out.append(_file_info(unstrip(fs, item, f), found[f], opts))
    if not out and empty_outputs:
        raise EmptyDatasetError(
            f"{empty_outputs[0]} is a committed output of 0 rows (its {MANIFEST_NAME} lists "
            "no file): every row was dropped or quarantined; its report says by what",
            empty_outputs[0],
        )
    if not out:
        shown = ", ".join(spec[:3]) + (" ..." if len(spec) > 3 else "")
        raise EmptyDatasetError(f"no data files matched {shown}", spec[0] if spec else None)
    return listed


#: what a pipeline still writing (or crashed writing) an output leaves in it
_UNFINISHED = "_work/out/_work/pipeline.json"


def _from_manifest(item: str, root: str, found: Listing, opts: dict[str, Any]) -> list[FileInfo]:
    manifest = join(item, MANIFEST_NAME)
    fs, path = resolve(manifest, **opts)
    with named(manifest):
        text = with_retries(partial(fs.cat_file, path))
    try:
        entries = json.loads(text)["files"]
        return [
            _file_info(join(item, e["path"]), found.get(f"{root}/{e['path'].strip('/')}"), opts)
            for e in entries
        ]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise FormatError(f"unreadable manifest ({exc})", manifest) from exc


def _file_info(url: str, details: dict[str, Any] | None, opts: dict[str, Any]) -> FileInfo:
    """From the listing's details; asked of the store only when they lack a size."""
    if not details or details.get("size") is None:
        return info(url, **opts)
    return FileInfo(url, int(details["size"]), fingerprint_of(details))


def choose_format(files: list[str], format: str | None) -> str:
    if format is not None:
        name = get_format(format).name
        for f in files:  # a file whose suffix names another format is not read as this one
            other = guess_format(f)
            if other is not None and other != name:
                raise FormatError(
                    f"format={format!r} was given, but this is a {other} file by its name; "
                    f"drop format= or pass format={other!r}",
                    f,
                )
        return name
    found: dict[str, str] = {}
    for f in files:
        found.setdefault(detect_format(f), f)
    if len(found) > 1:
        shown = ", ".join(f"{k} ({v})" for k, v in found.items())
        raise FormatError(f"the paths mix formats: {shown}; pass format=... or narrow the glob")
    return next(iter(found))
