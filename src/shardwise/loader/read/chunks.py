"""Where a Parquet file's column chunks lie, from its footer: what the node cache stores
when a dataset reads some of its columns (see :mod:`shardwise.loader.read.cached`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import IO, NamedTuple

import pyarrow.parquet as pq

__all__ = ["OVERLAP_SHARE", "Chunk", "chosen", "row_group_chunks", "span", "until"]


# a range crossing into the footer's entries ends at its own end if that holds at most this
# share of it twice (so a large chunk is one entry, read in place), else where they start
OVERLAP_SHARE = 1 / 128


class Chunk(NamedTuple):
    """Bytes ``[start, end)`` of one column chunk, and the top-level column it belongs to."""

    column: str
    start: int
    end: int


def row_group_chunks(f: IO[bytes]) -> list[list[Chunk]]:
    """Every row group's column chunks (leaf columns, in file order), from the footer."""
    pf = pq.ParquetFile(f)
    md = pf.metadata
    names = pf.schema_arrow.names
    out = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        chunks = []
        for c in range(rg.num_columns):
            col = rg.column(c)
            first = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset:
                first = min(first, col.dictionary_page_offset)
            top = _top_level(col.path_in_schema, names)
            chunks.append(Chunk(top, first, first + col.total_compressed_size))
        out.append(chunks)
    return out


def _top_level(path: str, names: Sequence[str]) -> str:
    """The top-level column a leaf path (``a.list.element``) belongs to (names may hold dots)."""
    for name in sorted(names, key=len, reverse=True):
        if path == name or path.startswith(name + "."):
            return name
    return path.split(".", 1)[0]


def chosen(chunks: Sequence[Chunk], columns: Sequence[str] | None) -> list[Chunk]:
    """The chunks a read of ``columns`` needs (all for None, or when one of them is not
    a column of this file: then the reader will read what Arrow reads for it)."""
    if columns is None:
        return list(chunks)
    have = {c.column for c in chunks}
    if not set(columns) <= have:
        return list(chunks)
    return [c for c in chunks if c.column in columns]


def span(chunks: Sequence[Chunk]) -> tuple[int, int]:
    """``[start, end)`` of all ``chunks`` (the row group's bytes); ``(0, 0)`` for none."""
    if not chunks:
        return 0, 0
    return min(c.start for c in chunks), max(c.end for c in chunks)


def until(start: int, end: int, stop: int) -> int:
    """Where the entry of the range ``[start, end)`` ends when the file's footer entries
    start at ``stop``: at ``stop``, the bytes past it then coming from those entries, unless
    the bytes past ``stop`` are at most :data:`OVERLAP_SHARE` of the range. Then at ``end``:
    a range read in two pieces is copied into new memory on every read, and a large one
    (a file's last column chunk, in all but the smallest files) costs far more that way
    than the few bytes it holds twice (at most the footer's last 64 KiB read)."""
    if end <= stop or (end - stop) > (end - start) * OVERLAP_SHARE:
        return min(end, stop)
    return end
