"""Resolve paths and URLs to fsspec filesystems; expand globs in a stable order."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import IO, Any

import fsspec
from fsspec.core import url_to_fs

from shardwise._optional import require
from shardwise.errors import ConfigError, EmptyDatasetError, StorageError
from shardwise.storage.listing import data_files, fingerprint_of, list_path
from shardwise.storage.localfs import mappable
from shardwise.storage.overlay import overlay_for
from shardwise.storage.refusals import named
from shardwise.storage.retry import with_retries

_PROTOCOL_EXTRAS = {
    "http": ("aiohttp", "HTTP access"),
    "https": ("aiohttp", "HTTP access"),
    "s3": ("s3fs", "S3 access"),
    "s3a": ("s3fs", "S3 access"),
    "gs": ("gcsfs", "GCS access"),
    "gcs": ("gcsfs", "GCS access"),
}

#: storage options the filesystems take as mappings (a string there fails deep inside them)
_MAPPING_OPTIONS = ("client_kwargs", "config_kwargs", "s3_additional_kwargs", "headers")


@dataclass(frozen=True)
class FileInfo:
    """Size and change fingerprint of one file.

    Attributes:
        path: the URL or local path.
        size: size in bytes.
        fingerprint: mtime or ETag text; changes when the file changes.
    """

    path: str
    size: int
    fingerprint: str


def _protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def resolve(url: str, **storage_options: Any) -> tuple[fsspec.AbstractFileSystem, str]:
    """Return ``(filesystem, path_in_filesystem)`` for a local path or URL.

    Raises:
        MissingExtraError: the protocol needs an optional package (e.g. s3fs).
        StorageError: the protocol is unknown.
        ConfigError: an option the filesystem takes as a mapping is not one.
    """
    for key in _MAPPING_OPTIONS:
        value = storage_options.get(key)
        if value is not None and not isinstance(value, Mapping):
            raise ConfigError(
                f"storage option {key!r} must be a dict, got {type(value).__name__} {value!r} "
                f"(for {url})"
            )
    proto = _protocol(url)
    if proto in _PROTOCOL_EXTRAS:
        require(*_PROTOCOL_EXTRAS[proto])
    if (
        proto in ("s3", "s3a")
        and "session" not in storage_options
        and "profile" not in storage_options
    ):
        storage_options = {**storage_options, "session": _s3_session()}
    try:
        fs, path = url_to_fs(url, **storage_options)
    except (ValueError, ImportError) as exc:
        raise StorageError(f"cannot open {url!r}: {exc}", url) from exc
    return fs, path


_SESSION: list[Any] = []


def _s3_session() -> Any:
    """One botocore session per process for S3 clients made without a profile: a new
    session parses botocore's endpoint and service descriptions again (about half a
    second of CPU), and a forked DataLoader worker inherits this one, already loaded."""
    if not _SESSION:
        from aiobotocore.session import AioSession

        _SESSION.append(AioSession())
    return _SESSION[0]


def unstrip(fs: fsspec.AbstractFileSystem, original: str, path: str) -> str:
    """Turn a filesystem-internal path back into a URL of the original's protocol."""
    proto = _protocol(original)
    if proto == "file":
        return path if not original.startswith("file://") else "file://" + path
    return str(fs.unstrip_protocol(path))


def join(base: str, *parts: str) -> str:
    """Join path parts onto a local path or URL with ``/``."""
    if _protocol(base) == "file" and "://" not in base:
        return os.path.join(base, *parts)
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)])


def expand(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    *,
    extensions: tuple[str, ...] | None = None,
    **storage_options: Any,
) -> list[str]:
    """Expand paths, directories and glob patterns into a sorted list of files.

    Directories are walked recursively; hidden files and files starting with ``_``
    (manifests, indexes, temp files), and everything under such directories inside the
    walked one (``_temporary/``, ``_work/``), are left out. The order is sorted per input and
    inputs keep the order given, so the result is stable across runs and machines.
    Listings are always fresh: the filesystem's listing cache is dropped first, so
    files added or changed by another process since an earlier call are seen.

    Args:
        paths: one path/URL/glob or a list of them.
        extensions: if given, keep only files whose name ends with one of these.
        storage_options: passed to fsspec.

    Raises:
        EmptyDatasetError: nothing matched.
    """
    items = (
        [os.fspath(paths)]
        if isinstance(paths, (str, os.PathLike))
        else [os.fspath(p) for p in paths]
    )
    if not items:
        raise EmptyDatasetError("no paths given", None)
    out: list[str] = []
    refreshed: list[fsspec.AbstractFileSystem] = []
    for item in items:
        fs, path = resolve(item, **storage_options)
        if not any(
            fs is seen for seen in refreshed
        ):  # once per filesystem: later items reuse these listings
            fs.invalidate_cache()
            refreshed.append(fs)
        with named(item):
            files = data_files(*list_path(fs, path, item), path)
        if extensions is not None:
            files = [f for f in files if f.endswith(extensions)]
        out.extend(unstrip(fs, item, f) for f in files)
    if not out:
        shown = ", ".join(items[:3]) + (" ..." if len(items) > 3 else "")
        raise EmptyDatasetError(f"no data files matched {shown}", items[0])
    return out


def require_bucket(url: str, **storage_options: Any) -> None:
    """Refuse an object-store output whose bucket does not exist (some servers would create
    it on the first write), naming the URL; no-op for local paths.

    Raises:
        StorageError: no such bucket, no credentials or access denied.
    """
    if _protocol(url) in ("file", "memory"):
        return
    fs, path = resolve(url, **storage_options)
    bucket = path.split("/", 1)[0]
    with named(url):
        found = with_retries(partial(fs.exists, bucket))
    if not found:  # or hidden by a refusal, which listing it tells apart
        try:
            with named(url):
                fs.invalidate_cache(bucket)
                fs.ls(bucket)
        except StorageError as exc:
            if exc.refused:
                raise
        raise StorageError(f"no such bucket {bucket!r}: {url}", url)


def info(url: str, **storage_options: Any) -> FileInfo:
    """Return the size and a change fingerprint (mtime or ETag) of one file.

    On object stores the answer may come from the listing made by the latest
    :func:`expand` (which always lists afresh), saving one request per file.
    """
    fs, path = resolve(url, **storage_options)
    with named(url):
        d = with_retries(partial(fs.info, path))
    return FileInfo(path=url, size=int(d.get("size") or 0), fingerprint=fingerprint_of(d))


def open_input(url: str, mode: str = "rb", **storage_options: Any) -> IO[bytes]:
    """Open a file for reading, retrying the open on transient errors (or from a node
    cache's entries while the loader serves this URL from them)."""
    served = overlay_for(url)
    if served is not None:
        return served()
    fs, path = resolve(url, **storage_options)
    with named(url):
        opened: IO[bytes] = with_retries(partial(fs.open, path, mode))
    return opened


def open_arrow_input(url: str, **storage_options: Any) -> Any:
    """Open a file for Arrow readers: a local file natively (no Python in the read path,
    no GIL held), memory-mapped where it is on a disk or memory filesystem (see
    :mod:`shardwise.storage.localfs`), anything else as :func:`open_input`."""
    if _protocol(url) == "file":
        import pyarrow as pa

        path, mapped = _local(url) if not storage_options else _local_of(url, storage_options)
        try:
            return pa.memory_map(path, "r") if mapped else pa.OSFile(path, "r")
        except FileNotFoundError as exc:
            raise StorageError(f"file not found: {url}", url) from exc
    return open_input(url, **storage_options)


@functools.lru_cache(maxsize=4096)
def _local(url: str) -> tuple[str, bool]:
    """A local ``url``'s path and whether it is memory-mapped (:func:`mappable`), worked
    out once per process: a unit read opened its file by resolving it again (a third of a
    millisecond, as much as reading a small row group's column)."""
    return _local_of(url, {})


def _local_of(url: str, storage_options: dict[str, Any]) -> tuple[str, bool]:
    _, path = resolve(url, **storage_options)
    return path, mappable(path)
