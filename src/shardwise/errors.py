"""The shardwise exception tree.

Every error shardwise raises on purpose derives from :class:`ShardwiseError`, so a
caller can catch one class. Errors about data name the file and the place in it
(line number, byte offset, row group, tar member) in their message and attributes::

    ShardwiseError
    ├── ConfigError          a bad argument, option or YAML config (names the key/line)
    ├── MissingExtraError    an optional package is not installed (names the pip line);
    │                        also an ImportError
    ├── StorageError         a path/URL cannot be listed, read or written
    │   ├── EmptyDatasetError  a path or glob matched no files
    │   └── CommitError        an atomic commit could not be completed
    ├── FormatError          bad input data: malformed JSON line, truncated Parquet,
    │   │                    unsafe tar member, unknown format
    │   └── UnsafeMemberError  a tar member with an absolute path, '..', a link or a device
    ├── PlanError            a loader plan cannot be built from the given topology/state
    ├── UnsupportedError     a step or feature a backend cannot run (names those that can);
    │                        also a NotImplementedError
    └── TaskError            a parallel task could not complete: its worker was lost more
                             than ``max_retries`` times, or its exception could not be
                             sent back (carries the item index and the remote traceback)

An exception raised by a function inside ``shardwise.parallel`` reaches the caller as
itself (a ``FormatError`` stays a ``FormatError`` on every backend), with two added
attributes, ``task_index`` and ``remote_traceback``, and a note showing both.
"""

from __future__ import annotations

__all__ = [
    "CommitError",
    "ConfigError",
    "EmptyDatasetError",
    "FormatError",
    "MissingExtraError",
    "PlanError",
    "ShardwiseError",
    "StorageError",
    "TaskError",
    "UnsafeMemberError",
    "UnsupportedError",
]


class ShardwiseError(Exception):
    """Base class of every error shardwise raises on purpose."""


class ConfigError(ShardwiseError, ValueError):
    """A bad argument, option or configuration entry."""


class MissingExtraError(ShardwiseError, ImportError):
    """An optional dependency is missing; the message names the pip line to run."""

    def __init__(self, package: str, extra: str, feature: str = "") -> None:
        what = f" for {feature}" if feature else ""
        super().__init__(
            f"{package} is required{what} but is not installed; "
            f'install it with: pip install "shardwise[{extra}]"'
        )
        self.package = package
        self.extra = extra
        self.feature = feature

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.package, self.extra, self.feature))


class StorageError(ShardwiseError, OSError):
    """A path or URL could not be listed, read or written. ``refused`` is True when the
    store refused the caller (no credentials, access denied) rather than lacked the path."""

    refused: bool = False

    def __init__(self, message: str, path: str | None = None, refused: bool = False) -> None:
        super().__init__(message)
        self.path = path
        self.refused = refused

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.args[0], self.path, self.refused))


class EmptyDatasetError(StorageError):
    """A path, list of paths or glob pattern matched no data files."""


class CommitError(StorageError):
    """An output could not be committed atomically."""


class FormatError(ShardwiseError, ValueError):
    """Bad input data. ``path`` and ``location`` say where (e.g. ``"line 17"``)."""

    def __init__(self, message: str, path: str | None = None, location: str | None = None) -> None:
        where = ""
        if path is not None:
            where = f"{path}" + (f", {location}" if location else "") + ": "
        super().__init__(f"{where}{message}")
        self.path = path
        self.location = location
        self.reason = message

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.reason, self.path, self.location))


class UnsafeMemberError(FormatError):
    """A tar member that could escape the output dir or is not a regular file."""


class PlanError(ShardwiseError, ValueError):
    """A loader plan cannot be built for the given dataset, topology or state."""


class UnsupportedError(ShardwiseError, NotImplementedError):
    """A step or feature that the chosen backend (or build) cannot run."""


class TaskError(ShardwiseError, RuntimeError):
    """A task raised on a parallel backend.

    Attributes:
        index: position of the failing item in the input.
        remote_traceback: the formatted traceback from the worker.
    """

    def __init__(self, message: str, index: int, remote_traceback: str = "") -> None:
        text = f"task {index} failed: {message}"
        if remote_traceback:
            text += f"\n--- remote traceback ---\n{remote_traceback}"
        super().__init__(text)
        self.message = message
        self.index = index
        self.remote_traceback = remote_traceback

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.message, self.index, self.remote_traceback))
