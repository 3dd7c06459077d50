"""One column chunk of a Parquet file, checked before anything is decoded: its byte range
against the file's size, then every page header against the values the chunk should hold.

Part of the page reader (:mod:`shardwise.formats.parquet._fixedlist`): anything that does not
add up raises :class:`~shardwise.formats.parquet._pages.Unreadable`, and the column is left to
Arrow.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.formats.parquet._pages import (
    CODECS,
    DICTIONARY,
    Page,
    Unreadable,
    as_bytes,
    read_page,
)

__all__ = ["MAX_PAGES", "allocate", "chunk_bytes", "chunk_start", "page_headers"]

# a chunk of more pages is left to Arrow: this reader's cost per page (~60 us of Python)
# would make it slower than Arrow's, and a hostile chunk of tiny pages costs Python time
MAX_PAGES = 1 << 14
MAX_CHUNK_ITEMS = 32 * MAX_PAGES  # Thrift fields and elements read in one chunk's headers


def chunk_bytes(chunk: Any, source: Any) -> memoryview:
    """The column chunk's bytes, once its range is checked against the file's size (as
    Arrow checks it). A storage error propagates: it is not the file's damage."""
    if chunk.compression not in CODECS:
        raise Unreadable(f"codec {chunk.compression}")
    start, size = chunk_start(chunk), chunk.total_compressed_size
    total = _file_size(source)
    if start < 0 or size < 0 or start + size > total:
        raise Unreadable(f"column chunk at {start} of {size} bytes in a file of {total}")
    if isinstance(source, mmap.mmap):  # a view of the map: nothing copied, nothing read ahead
        data = memoryview(source)[start : start + size]
    elif isinstance(source, pa.MemoryMappedFile):  # a slice of the map: no copy, no new memory
        source.seek(start)  # (``read_at`` would copy the chunk into new memory, page by page)
        data = source.read_buffer(size)
    elif hasattr(source, "read_at"):
        data = source.read_at(size, start)
    else:  # a Python file (fsspec)
        source.seek(start)
        data = source.read(size)
    b = as_bytes(data)
    if len(b) != size:
        raise Unreadable("column chunk shorter than its metadata says")
    return b


def _file_size(source: Any) -> int:
    """The size of an Arrow file (``size()``) or of a Python one (fsspec's ``size``)."""
    size = getattr(source, "size", None)
    if callable(size):
        return int(size())
    return int(size) if isinstance(size, int) else int(source.seek(0, 2))


def chunk_start(chunk: Any) -> int:
    """Where the chunk's pages start: at its dictionary page if it has one before its
    first data page (as Arrow reads it), else at its first data page."""
    first = chunk.dictionary_page_offset if chunk.has_dictionary_page else None
    return (
        first
        if first is not None and 0 < first < chunk.data_page_offset
        else chunk.data_page_offset
    )


def page_headers(b: memoryview, count: int, itemsize: int) -> list[Page]:
    """Every page header of the chunk, checked before anything is decompressed: the data
    pages hold ``count`` values in all, each page's sizes are bounded by its values (so
    no decompression allocates more than a small multiple of the column's output), and
    the pages fill the chunk exactly."""

    def values(page: Page, first: bool, got: int) -> int:
        n = page.num_values
        if page.kind == DICTIONARY:
            if not first or n > count or page.uncompressed != n * itemsize:
                raise Unreadable("a dictionary page not first, or of another size")
            return 0
        if page.uncompressed > n * (itemsize + 8) + 1024 or n == 0 or got + n > count:
            raise Unreadable("a data page larger than its values, empty, or one too many")
        return n

    return walk_pages(b, count, values)


def walk_pages(b: memoryview, count: int, values: Callable[[Page, bool, int], int]) -> list[Page]:
    """Every page header of the chunk ``b``, each checked by ``values(page, first, got)``
    (which raises :class:`Unreadable`, or gives the values the page adds to the ``got``
    so far) before anything is decompressed; the pages must fill the chunk exactly, with
    ``count`` values in all."""
    pages: list[Page] = []
    pos = items = got = 0
    while pos < len(b):
        page = read_page(b, pos)
        pos, items = page.body + page.compressed, items + page.items
        if pos > len(b) or items > MAX_CHUNK_ITEMS or len(pages) >= MAX_PAGES:
            raise Unreadable("a page past its chunk, or pages or headers too many to read here")
        got += values(page, not pages, got)
        pages.append(page)
    if got != count:
        raise Unreadable(f"pages of {got} values in a chunk of {count}")
    return pages


def allocate(count: int, dtype: np.dtype) -> np.ndarray:
    # from Arrow's memory pool, which serves it from the memory of units let go before
    # (new memory from the kernel would be mapped and zeroed page by page)
    try:
        return np.frombuffer(pa.allocate_buffer(count * dtype.itemsize), dtype=dtype)
    except (MemoryError, pa.ArrowMemoryError) as exc:  # Arrow reads page by page instead
        raise Unreadable(f"no memory for {count} values at once") from exc
