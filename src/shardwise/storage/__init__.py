"""Storage over fsspec: paths and URLs, sorted globs, retries, atomic commit.

Public helpers (all take a local path or a URL such as ``s3://b/k``, ``gs://``,
``https://`` or ``memory://``):

- :func:`resolve` -> ``(filesystem, path)``
- :func:`expand` -> sorted list of file URLs from paths, directories and globs
- :func:`info` -> :class:`FileInfo` (size, and mtime or ETag as a fingerprint)
- :func:`open_input` -> a seekable binary file, with retries on transient errors
- :func:`open_arrow_input` -> the same for Arrow readers (a native file when local)
- :func:`open_sequential` -> a file read from start to end, remote blocks fetched ahead
- :func:`read_locally` -> whether a URL's reads come from this machine (disk or node cache)
- :func:`atomic_write` -> context manager writing to a temp name, committing on success
- :func:`require_bucket` -> refuse an output in a bucket that does not exist
- :func:`with_retries` -> call a function with exponential backoff on transient errors

The node cache is the sub-package :mod:`shardwise.storage.cache`; the rest is the core
it builds on.

May import: ``shardwise.errors`` and ``shardwise._optional`` (see ``docs/layers.toml``).
"""

from shardwise.storage.atomic import atomic_write
from shardwise.storage.paths import (
    FileInfo,
    expand,
    info,
    join,
    open_arrow_input,
    open_input,
    require_bucket,
    resolve,
)
from shardwise.storage.readahead import open_sequential, read_locally
from shardwise.storage.refusals import named
from shardwise.storage.retry import is_transient, transient_in_chain, with_retries

__all__ = [
    "FileInfo",
    "atomic_write",
    "expand",
    "info",
    "is_transient",
    "join",
    "named",
    "open_arrow_input",
    "open_input",
    "open_sequential",
    "read_locally",
    "require_bucket",
    "resolve",
    "transient_in_chain",
    "with_retries",
]
