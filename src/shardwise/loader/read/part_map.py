"""A unit's memory-mapped file mapped again for one part's page reads
(:mod:`shardwise.loader.read.unit_heads`), and let go when the part is read."""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pyarrow as pa

__all__ = ["pages_source", "shrunk"]


@contextmanager
def pages_source(source: Any) -> Iterator[Any]:
    """The file the binary page reader reads a part from, ``source`` being the unit's
    own: a memory-mapped file mapped again, from its descriptor, for this read alone.

    The pages a read touches (with the page cache's large folios, most of a dictionary page
    of images whose values' lengths are walked) stay in the process's resident memory while
    their mapping lives, and a unit's stays open until its rest: 13 units of images waiting
    for their rests held 300 MB so. The same descriptor maps the same file as the unit's own
    mapping (a file replaced at its path meanwhile is not read); a file grown since (written
    in place) is read from the unit's own mapping, as Arrow's columns are, but one cut
    shorter is read from the new mapping, whose end is the file's: a chunk past it is then
    declined, where a read of the unit's mapping past the file's end killed the process
    (SIGBUS). A Python ``mmap``, not Arrow's: Arrow asks the kernel to read ahead every
    range it hands out, 35 MB for a head of images that reads 2.5 MB of it. Any other file
    (the node cache's leased entries) is read as it is."""
    if not isinstance(source, pa.MemoryMappedFile):
        yield source
        return
    again = _map_again(source)
    if again is None:
        yield source
        return
    try:
        yield again if len(again) <= source.size() else source
    finally:
        _unmap(again)


def shrunk(source: Any) -> bool:
    """Whether the file of a memory-mapped ``source`` is now shorter than its mapping (cut
    in place since it was opened): a read of the mapping past the file's end would kill
    the process (SIGBUS) where a read of the file gives an error."""
    if not isinstance(source, pa.MemoryMappedFile):
        return False
    try:
        return os.fstat(source.fileno()).st_size < source.size()
    except (OSError, ValueError, pa.ArrowException):
        return True


def _map_again(source: pa.MemoryMappedFile) -> mmap.mmap | None:
    """A new read-only mapping of ``source``'s file (None: it cannot be mapped)."""
    try:
        return mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError, pa.ArrowException):
        return None


def _unmap(m: mmap.mmap) -> None:
    """Unmap ``m`` now, or (a view of it still held) once the last view is let go."""
    try:
        m.close()
    except BufferError:
        pass
