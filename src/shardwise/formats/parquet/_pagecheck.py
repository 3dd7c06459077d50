"""Which page of a column chunk Arrow could not decode: asked only after a read failed, so
that the error names the page, not only the row group and the column.

Each page header of the column's chunks is read and each page body decompressed to the
size its header declares (:mod:`shardwise.formats.parquet._pages`, bounded as the page
reader is); the first that fails is named by its number in the chunk and the byte of the
file where its header starts. A chunk of a codec the page reader does not check (LZ4,
Brotli) or whose pages all decompress (the damage is in the values) names no page.
"""

from __future__ import annotations

from typing import Any

from shardwise.formats.parquet._chunk import chunk_bytes, chunk_start
from shardwise.formats.parquet._pages import DATA_V2, Unreadable, inflate, read_page

__all__ = ["bad_page"]


def bad_page(pf: Any, source: Any, group: int, column: str) -> str | None:
    """``"page K of N, its header at byte B: why"`` for the first page of ``column`` in row
    group ``group`` that does not decompress, else ``None``."""
    rg = pf.metadata.row_group(group)
    for leaf in range(rg.num_columns):
        chunk = rg.column(leaf)
        if chunk.path_in_schema.split(".")[0] != column:
            continue
        try:
            b = chunk_bytes(chunk, source)
        except (Unreadable, OSError):
            return None  # a codec left to Arrow, or the range is the chunk's (not a page's)
        found = _first_bad(b, chunk_start(chunk), chunk.compression)
        if found is not None:
            return found
    return None


def _first_bad(b: memoryview, start: int, codec: str) -> str | None:
    pos, k, problem = 0, 0, None
    while pos < len(b) and problem is None:
        at = pos
        try:
            page = read_page(b, pos)
            end = page.body + page.compressed
            if end > len(b):
                raise Unreadable("its body runs past the column chunk")
            _inflate(b, page, codec)
        except (Unreadable, IndexError, RecursionError) as exc:
            problem = (k, at, str(exc) or type(exc).__name__)
        else:
            pos, k = end, k + 1
    if problem is None:
        return None
    k, at, why = problem
    return f"page {k + 1}, its header at byte {start + at} of the file: {why}"


def _inflate(b: memoryview, page: Any, codec: str) -> None:
    body = b[page.body : page.body + page.compressed]
    if page.kind == DATA_V2:  # levels first, uncompressed; values compressed if marked
        levels = page.def_length + page.rep_length
        if levels > min(len(body), page.uncompressed):
            raise Unreadable("levels longer than the page")
        inflate(
            body[levels:],
            page.uncompressed - levels,
            codec if page.is_compressed else "UNCOMPRESSED",
        )
    else:
        inflate(body, page.uncompressed, codec)
