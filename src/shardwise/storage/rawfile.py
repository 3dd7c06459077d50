"""A read-only, seekable raw file of a known size: the position and its moves, shared by
the files that serve bytes from elsewhere (ranges in memory, blocks read ahead, a footer)."""

from __future__ import annotations

import io

__all__ = ["SizedRawFile"]


class SizedRawFile(io.RawIOBase):
    """Readable and seekable over ``size`` bytes; subclasses read from ``self._pos``."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self._size = size
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move to ``offset`` from the start, the position or the end (never before 0)."""
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def tell(self) -> int:
        return self._pos
