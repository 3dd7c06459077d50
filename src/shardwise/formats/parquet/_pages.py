"""Parquet page headers: the Thrift compact encoding, read just far enough to walk a column chunk.

Only what :mod:`shardwise.formats.parquet._fixedlist` needs is kept (page type, sizes, value
count, encodings, the v2 level lengths); every other field, statistics included, is
skipped. A malformed header raises ``ValueError`` or ``IndexError``; the caller then
lets Arrow read the column, which reports the damage.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

import pyarrow as pa

__all__ = [
    "CODECS",
    "DATA",
    "DATA_V2",
    "DICTIONARY",
    "Page",
    "Unreadable",
    "as_bytes",
    "inflate",
    "read_page",
    "varint",
]

DATA, DICTIONARY, DATA_V2 = 0, 2, 3  # Parquet PageType
_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(
    13
)
_INTS = (_I16, _I32, _I64)
_DEPTH = 16  # nested structs deeper than this are not a page header
#: the codecs whose output length is checked exactly, as Arrow checks it (pyarrow's
#: ``Codec.decompress`` pads a short output to the size asked, so Brotli and LZ4 are left to Arrow)
CODECS = ("UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD")


class Unreadable(ValueError):
    """Bytes this reader does not read (damaged, hostile or simply another layout). It
    never reaches a user: the caller leaves the column to Arrow, which reads it or
    reports the damage as a ``FormatError``."""


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


def varint(b: memoryview, i: int) -> tuple[int, int]:
    """The unsigned LEB128 integer at ``i`` (Thrift's and the hybrid runs' headers), and
    where it ends."""
    out = shift = 0
    while True:
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i
        if shift > 63:
            raise Unreadable("varint too long")


def _zigzag(v: int) -> int:
    return (v >> 1) ^ -(v & 1)


def _skip(b: memoryview, i: int, t: int, depth: int, element: bool = False) -> int:
    if t in (_TRUE, _FALSE):
        return i + 1 if element else i  # in a list, a bool is a byte; as a field, it is the type
    if t == _BYTE:
        return i + 1
    if t in _INTS:
        return varint(b, i)[1]
    if t == _DOUBLE:
        return i + 8
    if t == _BINARY:
        n, i = varint(b, i)
        return i + n
    if t in (_LIST, _SET):
        head = b[i]
        n, et, i = head >> 4, head & 15, i + 1
        if n == 15:
            n, i = varint(b, i)
        _room(b, i, n, depth)
        for _ in range(n):
            i = _skip(b, i, et, depth + 1, element=True)
        return i
    if t == _MAP:
        n, i = varint(b, i)
        if n:
            kinds, i = b[i], i + 1
            _room(b, i, 2 * n, depth)
            for _ in range(n):
                i = _skip(b, _skip(b, i, kinds >> 4, depth + 1, True), kinds & 15, depth + 1, True)
        return i
    if t == _STRUCT:
        return _struct(b, i, {}, depth + 1)[1]
    raise Unreadable(f"unknown Thrift type {t}")


def _room(b: memoryview, i: int, n: int, depth: int) -> None:
    """A container of ``n`` elements (each at least a byte) must fit in what is left."""
    if n > len(b) - i or depth > _DEPTH:
        raise Unreadable("a Thrift container larger than its page header, or nested too deep")


_Fields = dict[int, "str | tuple[str, _Fields]"]


def _struct(b: memoryview, i: int, want: _Fields, depth: int) -> tuple[dict[str, object], int]:
    """Read a struct from ``i``: the fields named in ``want`` (id -> name, or (name,
    fields) for a struct), the rest skipped."""
    if depth > _DEPTH:
        raise Unreadable("Thrift structs nested too deep")
    out: dict[str, object] = {}
    fid = 0
    while True:
        head, i = b[i], i + 1
        if head == _STOP:
            return out, i
        t, delta = head & 15, head >> 4
        if delta:
            fid += delta
        else:
            v, i = varint(b, i)
            fid = _zigzag(v)
        spec = want.get(fid)
        if spec is not None and t in _INTS:
            v, i = varint(b, i)
            out[spec if isinstance(spec, str) else spec[0]] = _zigzag(v)
        elif spec is not None and t in (_TRUE, _FALSE):
            out[spec if isinstance(spec, str) else spec[0]] = t == _TRUE
        elif isinstance(spec, tuple) and t == _STRUCT:
            out[spec[0]], i = _struct(b, i, spec[1], depth + 1)
        else:
            i = _skip(b, i, t, depth)


_DATA_FIELDS: _Fields = {1: "num_values", 2: "encoding", 3: "def_encoding", 4: "rep_encoding"}
_DICT_FIELDS: _Fields = {1: "num_values", 2: "encoding"}
_V2_FIELDS: _Fields = {
    1: "num_values",
    2: "num_nulls",
    3: "num_rows",
    4: "encoding",
    5: "def_length",
    6: "rep_length",
    7: "is_compressed",
}
_HEADER: _Fields = {
    1: "kind",
    2: "uncompressed",
    3: "compressed",
    5: ("data", _DATA_FIELDS),
    7: ("dictionary", _DICT_FIELDS),
    8: ("data_v2", _V2_FIELDS),
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
    or v2) or a dictionary page with every field Parquet requires of it (ValueError
    for any other page, or a field missing or negative)."""
    fields, body = _struct(b, i, _HEADER, 0)
    kind = fields.get("kind")
    if kind not in _REQUIRED or not {"uncompressed", "compressed"} <= fields.keys():
        raise Unreadable(f"page of type {kind} or without its sizes")
    name, required = _REQUIRED[kind]
    sub = fields.get(name)
    if not isinstance(sub, dict) or not required <= sub.keys():
        raise Unreadable(f"page header without its {name} header or one of {sorted(required)}")
    page = Page(int(kind), int(fields["uncompressed"]), int(fields["compressed"]), body=body)  # type: ignore[call-overload]
    for key, value in sub.items():
        setattr(page, key, value)
    if (
        min(
            page.compressed,
            page.uncompressed,
            page.num_values,
            page.def_length,
            page.rep_length,
            page.num_nulls,
        )
        < 0
    ):
        raise Unreadable("negative size in a page header")
    return page


def as_bytes(buf: object) -> memoryview:
    """A buffer as unsigned bytes (a memoryview of an Arrow buffer is signed)."""
    return memoryview(buf).cast("B")  # type: ignore[arg-type]


def inflate(body: memoryview, size: int, codec: str) -> memoryview:
    """A page body (``codec`` as the column chunk names it) decompressed to exactly
    ``size`` bytes, as unsigned bytes; ValueError when it is not that long."""
    if codec == "UNCOMPRESSED":
        out = body
    elif codec == "SNAPPY":  # the stream opens with its length; the decoder checks it
        if varint(body, 0)[0] != size:
            raise Unreadable("snappy page of another length than its header says")
        out = as_bytes(pa.Codec("snappy").decompress(body, size))
    elif codec == "GZIP":
        out = memoryview(zlib.decompress(body, 32 + zlib.MAX_WBITS))
    elif codec == "ZSTD":  # zstd refuses any other length itself
        out = as_bytes(pa.Codec("zstd").decompress(body, size))
    else:
        raise Unreadable(f"codec {codec}")
    if len(out) != size:
        raise Unreadable(f"page of {len(out)} bytes where its header says {size}")
    return out
