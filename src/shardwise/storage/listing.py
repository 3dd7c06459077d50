"""One listing per path: the files a path, directory or glob names, with the size and
change fingerprint the listing already gives (no request per file on object stores)."""

from __future__ import annotations

from functools import partial
from typing import Any

import fsspec

from shardwise.errors import EmptyDatasetError
from shardwise.storage.retry import with_retries

__all__ = ["Listing", "data_files", "fingerprint_of", "hidden", "list_path"]

_GLOB_CHARS = set("*?[")

#: name -> the listing's details of that entry (size, ETag or mtime, type)
Listing = dict[str, dict[str, Any]]


def fingerprint_of(details: dict[str, Any]) -> str:
    """The change fingerprint in a listing's (or a HEAD's) details: ETag, else mtime."""
    fp = (
        details.get("ETag")
        or details.get("etag")
        or details.get("mtime")
        or details.get("LastModified")
        or details.get("last_modified")
        or details.get("created")
        or ""
    )
    return str(fp).strip('"')


def list_path(fs: fsspec.AbstractFileSystem, path: str, item: str) -> tuple[Listing, bool]:
    """Everything ``path`` names, by one listing where the store allows: a glob's
    matches (or, when it matches nothing, the file or directory of that very name), a
    directory's whole tree (hidden entries included: callers filter), or the
    file itself; and whether ``path`` is a directory. Names are sorted.

    Raises:
        EmptyDatasetError: nothing exists at ``path`` (naming a missing bucket).
    """
    if _GLOB_CHARS & set(path):
        found = with_retries(partial(fs.glob, path, detail=True))
        files = {p: d for p, d in found.items() if d.get("type") != "directory"}
        if files or not with_retries(partial(fs.exists, path)):
            return _sorted(files), False
        # a pattern that matches nothing but is itself a name (``part[1].parquet``): as a shell
        # leaves such a word as it is, the name is taken literally
    # one recursive listing tells a directory (entries below it) from a file (itself);
    # asking isdir first would list the prefix a second time on an object store
    try:
        found = with_retries(partial(fs.find, path, detail=True))
    except FileNotFoundError:  # no such bucket: told apart below
        found = {}
    files = {p: d for p, d in found.items() if d.get("type") != "directory"}
    bare = path.rstrip("/")
    if files and set(files) != {bare} and set(files) != {path}:
        return _sorted(files), True
    if files:
        return files, False
    if with_retries(partial(fs.isdir, path)):
        return {}, True
    if with_retries(partial(fs.exists, path)):
        return {path: {}}, False
    _refuse_missing(fs, path, item)
    return {}, False


def hidden(path: str) -> bool:
    """A name starting with ``.`` or ``_`` (manifests, indexes, temp files)."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name.startswith((".", "_"))


def data_files(found: Listing, is_dir: bool, path: str) -> list[str]:
    """The data files of :func:`list_path`'s answer: hidden files left out, and inside a
    walked directory everything under a hidden or ``_`` directory (``_temporary/``,
    ``_work/``, ``.cache/``) too."""
    root = path.rstrip("/") + "/"
    return [
        p
        for p in found
        if not hidden(p)
        and not (is_dir and any(hidden(part) for part in p[len(root) :].split("/")[:-1]))
    ]


def _sorted(found: Listing) -> Listing:
    return {p: found[p] for p in sorted(found)}


def _refuse_missing(fs: fsspec.AbstractFileSystem, path: str, item: str) -> None:
    bucket = path.split("/", 1)[0]
    remote = "://" in item and not item.startswith("file://")
    if remote and bucket and bucket != path and not with_retries(partial(fs.exists, bucket)):
        raise EmptyDatasetError(f"no such bucket {bucket!r}: {item}", item)
    raise EmptyDatasetError(f"no such file or directory: {item}", item)
