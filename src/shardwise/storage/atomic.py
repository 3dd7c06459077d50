"""Atomic commit of outputs: write to a temporary name, then publish in one step.

On a local filesystem the temporary file sits in the target's directory and is
published with ``os.replace`` (atomic on POSIX). On object stores, where a PUT is
already all-or-nothing, the data is written to a hidden temporary key, then copied
to the final key and the temporary key deleted; a reader listing with
:func:`shardwise.storage.expand` never sees the hidden temporary key.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

from shardwise.errors import CommitError, ConfigError, StorageError
from shardwise.storage.paths import resolve
from shardwise.storage.refusals import named
from shardwise.storage.retry import with_retries


def temp_name(path: str) -> str:
    """Return a hidden temporary sibling name for ``path``."""
    head, _, name = path.rpartition("/")
    tmp = f"_tmp.{uuid.uuid4().hex[:12]}.{name}"
    return f"{head}/{tmp}" if head else tmp


@contextmanager
def atomic_write(
    url: str, mode: str = "wb", *, durable: bool = True, **storage_options: Any
) -> Iterator[IO[Any]]:
    """Open ``url`` for writing so that it appears whole or not at all.

    ``durable=False`` skips the fsync before a local rename: the file still appears whole
    or not at all to other processes, but may be lost in a power cut (for scratch files
    that are recomputed on every run anyway).

    Usage::

        with atomic_write("s3://bucket/out/part-0.parquet") as f:
            f.write(data)

    If the body raises, the temporary file is removed and nothing is published.

    Raises:
        CommitError: the final rename/copy failed.
    """
    if mode not in ("wb", "w"):
        raise ConfigError(f"atomic_write mode must be 'wb' or 'w', got {mode!r}")
    fs, path = resolve(url, **storage_options)
    local = "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))
    if local:
        os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    tmp = temp_name(path)
    with named(url):
        f = with_retries(lambda: fs.open(tmp, mode))
    try:
        yield f
        _close(f, url, fsync=local and durable)
    except BaseException:
        with contextlib.suppress(Exception):
            f.close()
        _remove_quietly(fs, tmp)
        raise
    _publish(fs, tmp, path, url, local=local)


def _close(f: IO[Any], url: str, *, fsync: bool) -> None:
    """Close the written file (after an fsync when ``fsync``, where the file has one)."""
    if fsync and hasattr(f, "flush"):
        f.flush()
        try:
            os.fsync(f.fileno())
        except (AttributeError, OSError, ValueError):
            pass
    with named(url):  # an object store's upload happens here: a refusal names the URL
        f.close()


def _publish(fs: Any, tmp: str, path: str, url: str, *, local: bool) -> None:
    """Rename (local) or copy (object store) the temporary file to its final name; a
    failure removes it and is a CommitError, unless the store refused or lacks the place."""
    try:
        if local:
            os.replace(tmp, path)
        else:
            with named(url):
                # one file to one name: ``copy``/``rm`` would read ``[1]`` in a name as a glob
                with_retries(lambda: fs.cp_file(tmp, path))
                with_retries(lambda: fs.rm_file(tmp))
    except StorageError as exc:
        _remove_quietly(fs, tmp)
        if exc.refused or "not found" in str(exc) or "no such bucket" in str(exc):
            raise
        raise CommitError(f"could not commit {url}: {exc}", url) from exc
    except Exception as exc:
        _remove_quietly(fs, tmp)
        raise CommitError(f"could not commit {url}: {exc}", url) from exc


def _remove_quietly(fs: Any, path: str) -> None:
    try:
        if fs.exists(path):
            fs.rm_file(path)
    except Exception:  # noqa: BLE001 - best-effort cleanup
        pass
