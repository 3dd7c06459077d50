"""Parquet page headers: the Thrift compact encoding, read just far enough to walk a column chunk.

Only what :mod:`shardwise.formats.parquet._fixedlist` needs is kept (page type, sizes, value
count, encodings, the v2 level lengths); every other field, statistics included, is
skipped. The reader is as strict as Arrow's, or stricter: each field it keeps must have
its exact Thrift type, no field may be given twice (Arrow merges a repeated sub-header,
which this reader would not match), and Arrow's limits hold (a header of at most 16 MiB,
strings of at most 100,000,000 bytes, containers of at most 1,000,000 elements; the
numbers are parquet-cpp's defaults; the cursor is :mod:`shardwise.formats.parquet._thrift`).
A header that breaks any of these raises :class:`Unreadable`, and the caller lets Arrow
read the column, which reports the damage. Page bodies are decompressed to exactly the
size their header declares, never more (:func:`inflate`).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from shardwise.formats.parquet._thrift import (
    I32,
    MAX_ITEMS,
    STRUCT,
    TRUE,
    Fields,
    Thrift,
    Unreadable,
    varint,
)

__all__ = [
    "CODECS",
    "DATA",
    "DATA_V2",
    "DICTIONARY",
    "MAX_ITEMS",
    "Page",
    "Unreadable",
    "as_bytes",
    "inflate",
    "read_page",
    "varint",
]

DATA, DICTIONARY, DATA_V2 = 0, 2, 3  # Parquet PageType
#: the codecs whose output length is checked exactly, as Arrow checks it (pyarrow's
#: ``Codec.decompress`` pads a short output to the size asked, so Brotli and LZ4 are left to Arrow)
CODECS = ("UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD")
SNAPPY_RATIO = 24  # snappy's output is at most ~21.3x its input (a 3-byte copy of 64 bytes)


@dataclass
class Page:
    """One page's header, and where its body is in the chunk."""

    kind: int
    uncompressed: int
    compressed: int
    num_values: int = 0
    encoding: int = -1
    def_encoding: int = 3  # RLE
    rep_encoding: int = 3
    num_nulls: int = 0
    num_rows: int = -1
    def_length: int = 0  # v2: bytes of levels, stored uncompressed before the values
    rep_length: int = 0
    is_compressed: bool = True
    body: int = 0  # offset of the body in the chunk
    items: int = 0  # Thrift fields and elements read one by one in the header


def _i32(*names: str) -> Fields:
    return {i + 1: (n, I32, None) for i, n in enumerate(names)}


_DATA_FIELDS = _i32("num_values", "encoding", "def_encoding", "rep_encoding")
_DICT_FIELDS = _i32("num_values", "encoding")
_V2_FIELDS = _i32("num_values", "num_nulls", "num_rows", "encoding", "def_length", "rep_length") | {
    7: ("is_compressed", TRUE, None)
}
_HEADER: Fields = _i32("kind", "uncompressed", "compressed", "crc") | {
    5: ("data", STRUCT, _DATA_FIELDS),
    7: ("dictionary", STRUCT, _DICT_FIELDS),
    8: ("data_v2", STRUCT, _V2_FIELDS),
}
_REQUIRED = {
    DATA: ("data", {"num_values", "encoding", "def_encoding", "rep_encoding"}),
    DICTIONARY: ("dictionary", {"num_values", "encoding"}),
    DATA_V2: (
        "data_v2",
        {"num_values", "num_nulls", "num_rows", "encoding", "def_length", "rep_length"},
    ),
}


def read_page(b: memoryview, i: int) -> Page:
    """The header of the page starting at ``i`` of a column chunk ``b``: a data page (v1
    or v2) or a dictionary page with every field Parquet requires of it (Unreadable
    for any other page, a field missing, negative or of another type, or a header
    Arrow would refuse)."""
    cursor = Thrift(b, i)
    fields = cursor.struct(_HEADER, 0)
    kind = fields.get("kind")
    if (
        not isinstance(kind, int)
        or kind not in _REQUIRED
        or len({"uncompressed", "compressed"} - fields.keys())
    ):
        raise Unreadable(f"page of type {kind} or without its sizes")
    name, required = _REQUIRED[kind]
    sub = fields.get(name)
    if not isinstance(sub, dict) or not required <= sub.keys():
        raise Unreadable(f"page header without its {name} header or one of {sorted(required)}")
    sizes: dict[str, Any] = fields
    page = Page(kind, sizes["uncompressed"], sizes["compressed"], body=cursor.i, items=cursor.items)
    for key, value in sub.items():
        setattr(page, key, value)
    if min(page.compressed, page.uncompressed, page.num_values, page.def_length) < 0:
        raise Unreadable("negative size in a page header")
    if min(page.rep_length, page.num_nulls) < 0:
        raise Unreadable("negative size in a page header")
    return page


def as_bytes(buf: object) -> memoryview:
    """A buffer as unsigned bytes (a memoryview of an Arrow buffer is signed)."""
    return memoryview(buf).cast("B")  # type: ignore[arg-type]


def _gunzip(body: memoryview, size: int) -> memoryview:
    """One gzip (or zlib) member of exactly ``size`` bytes, nothing after it; never more
    than ``size + 1`` bytes are inflated, whatever the stream holds."""
    d = zlib.decompressobj(32 + zlib.MAX_WBITS)
    try:
        out = d.decompress(body, size + 1)
    except zlib.error as exc:
        raise Unreadable(f"gzip page: {exc}") from exc
    if not d.eof or d.unused_data or d.unconsumed_tail:
        raise Unreadable("gzip page longer than its header says, cut short or with bytes after it")
    return memoryview(out)


def inflate(body: memoryview, size: int, codec: str) -> memoryview:
    """A page body (``codec`` as the column chunk names it) decompressed to exactly
    ``size`` bytes, as unsigned bytes; Unreadable when it is not that long. Nothing is
    allocated beyond ``size`` (and snappy's ``size`` must be one its input can give)."""
    if codec == "UNCOMPRESSED":
        out = body
    elif codec == "GZIP":
        out = _gunzip(body, size)
    elif codec in ("SNAPPY", "ZSTD"):
        if codec == "SNAPPY" and (
            varint(body, 0)[0] != size or size > SNAPPY_RATIO * len(body) + 64
        ):  # the stream opens with its length; the decoder checks it
            raise Unreadable("snappy page of another length than its header says")
        try:  # zstd refuses any other length itself
            out = as_bytes(pa.Codec(codec.lower()).decompress(body, size))
        except OSError as exc:  # the codec's own complaint about its bytes (not storage's)
            raise Unreadable(f"{codec.lower()} page: {exc}") from exc
        except MemoryError as exc:  # the size a header chose: Arrow allocates it, or reports
            raise Unreadable(f"no memory for a page of {size} bytes") from exc
    else:
        raise Unreadable(f"codec {codec}")
    if len(out) != size:
        raise Unreadable(f"page of {len(out)} bytes where its header says {size}")
    return out
