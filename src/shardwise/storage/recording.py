"""A Python file that remembers the error its reads raised, so a reader can tell storage's
failures from the damage of bytes already read.

Arrow reads a Python file (an fsspec file of an object store) through callbacks, and an
error there reaches the caller as itself or wrapped in Arrow's own; a message is no
guide (a decode error may say "503", a storage error may not). What the file itself
raised is what storage failed at; everything else happened to bytes already read.
"""

from __future__ import annotations

from functools import partial
from typing import Any

__all__ = ["RecordingFile", "storage_failure"]


class RecordingFile:
    """Wraps a readable Python file; ``failed`` is the first exception its reads raised."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.failed: BaseException | None = None

    def _record(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self._raw, method)(*args)
        except Exception as exc:
            if self.failed is None:
                self.failed = exc
            raise

    def read(self, *args: Any) -> Any:
        """Read as the wrapped file reads, remembering a failure."""
        return self._record("read", *args)

    def readinto(self, *args: Any) -> Any:
        """Read into a buffer as the wrapped file does, remembering a failure."""
        return self._record("readinto", *args)

    def seek(self, *args: Any) -> Any:
        """Seek as the wrapped file does, remembering a failure."""
        return self._record("seek", *args)

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._raw, name)
        if name in ("read_buffer", "read_at"):  # the wrapped file's reads that Arrow calls
            return partial(self._record, name)
        return found


def storage_failure(source: Any) -> BaseException | None:
    """The error ``source``'s storage raised, if it is a :class:`RecordingFile` that failed."""
    return source.failed if isinstance(source, RecordingFile) else None
