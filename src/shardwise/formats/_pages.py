"""Parquet page headers: the Thrift compact encoding, read just far enough to walk a column chunk.

Only what :mod:`shardwise.formats._fixedlist` needs is kept (page type, sizes, value
count, encodings, the v2 level lengths); every other field, statistics included, is
skipped. The reader is as strict as Arrow's, or stricter: each field it keeps must have
its exact Thrift type, no field may be given twice (Arrow merges a repeated sub-header,
which this reader would not match), and Arrow's limits hold (a header of at most 16 MiB,
strings of at most 100,000,000 bytes, containers of at most 1,000,000 elements; the
numbers are parquet-cpp's defaults). A header that breaks any of these raises
:class:`Unreadable`, and the caller lets Arrow read the column, which reports the damage.
Skipping costs no Python time per byte: strings and lists of fixed-size elements are
stepped over whole, and a header of more than ``MAX_ITEMS`` fields and elements (real
ones have a few dozen) is declined.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

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
_BOOL = (_TRUE, _FALSE)
_WIDTH = {_TRUE: 1, _FALSE: 1, _BYTE: 1, _DOUBLE: 8}  # elements a list steps over whole
_DEPTH = 16  # nested structs deeper than this are not a page header
MAX_HEADER = 16 * 1024 * 1024  # parquet-cpp's kDefaultMaxPageHeaderSize
MAX_STRING = 100 * 1000 * 1000  # parquet-cpp's kDefaultThriftStringSizeLimit
MAX_CONTAINER = 1000 * 1000  # parquet-cpp's kDefaultThriftContainerSizeLimit
MAX_ITEMS = 4096  # fields and elements read one by one in a header (a real one: a few dozen)
#: the codecs whose output length is checked exactly, as Arrow checks it (pyarrow's
#: ``Codec.decompress`` pads a short output to the size asked, so Brotli and LZ4 are left to Arrow)
CODECS = ("UNCOMPRESSED", "SNAPPY", "GZIP", "ZSTD")
SNAPPY_RATIO = 24  # snappy's output is at most ~21.3x its input (a 3-byte copy of 64 bytes)


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
    items: int = 0  # Thrift fields and elements read one by one in the header


def varint(b: memoryview, i: int) -> tuple[int, int]:
    """The unsigned LEB128 integer at ``i`` (Thrift's and the hybrid runs' headers), and
    where it ends."""
    out = shift = 0
    while True:
        if i >= len(b):
            raise Unreadable("varint past the end of its bytes")
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return out, i
        if shift > 63:
            raise Unreadable("varint too long")


def _signed(v: int, bits: int) -> int:
    """The zigzag-encoded ``v`` as a signed integer of ``bits`` (Unreadable outside it)."""
    out = (v >> 1) ^ -(v & 1)
    if not -(1 << (bits - 1)) <= out < 1 << (bits - 1):
        raise Unreadable(f"a Thrift i{bits} out of range")
    return out


# a field kept: (its name, its Thrift type, the fields kept of it when it is a struct)
_Fields = dict[int, "tuple[str, int, _Fields | None]"]


class _Thrift:
    """A cursor over one page header, counting the work spent on it."""

    def __init__(self, b: memoryview, i: int) -> None:
        self.b, self.i, self.items = b, i, 0
        self.end = min(len(b), i + MAX_HEADER)

    def byte(self) -> int:
        if self.i >= self.end:
            raise Unreadable("page header past its chunk or over Arrow's 16 MiB")
        c: int = self.b[self.i]
        self.i += 1
        return c

    def signed(self, bits: int) -> int:
        value, self.i = varint(self.b[: self.end], self.i)
        return _signed(value, bits)

    def size(self) -> int:
        """A length (of a string or container): a varint Thrift reads as an i32."""
        value, self.i = varint(self.b[: self.end], self.i)
        if value >= 1 << 31:
            raise Unreadable("a Thrift container or string size out of range")
        return value

    def step(self, n: int, what: str) -> None:
        if n < 0 or n > self.end - self.i:
            raise Unreadable(f"a Thrift {what} longer than its page header")
        self.i += n

    def count(self, n: int = 1) -> None:
        self.items += n
        if self.items > MAX_ITEMS:
            raise Unreadable(f"a page header of more than {MAX_ITEMS} Thrift fields and elements")

    def skip(self, t: int, depth: int, element: bool = False) -> None:
        self.count()
        if t in _BOOL:  # as a field, a bool is its type; in a list, a byte
            self.step(1 if element else 0, "bool")
        elif t == _BYTE:
            self.step(1, "byte")
        elif t in (_I16, _I32, _I64):
            self.signed({_I16: 16, _I32: 32, _I64: 64}[t])
        elif t == _DOUBLE:
            self.step(8, "double")
        elif t == _BINARY:
            n = self.size()
            if n > MAX_STRING:
                raise Unreadable("a Thrift string over Arrow's limit")
            self.step(n, "string")
        elif t in (_LIST, _SET):
            self._list(depth)
        elif t == _MAP:
            self._map(depth)
        elif t == _STRUCT:
            self.struct({}, depth + 1)
        else:
            raise Unreadable(f"unknown Thrift type {t}")

    def _size(self, n: int, depth: int) -> int:
        if n > MAX_CONTAINER or depth > _DEPTH:
            raise Unreadable("a Thrift container over Arrow's limit, or nested too deep")
        return n

    def _list(self, depth: int) -> None:
        head = self.byte()
        n, et = head >> 4, head & 15
        n = self._size(self.size() if n == 15 else n, depth)
        if et in _WIDTH:
            self.step(n * _WIDTH[et], "list")
            return
        self.count(n)
        for _ in range(n):
            self.skip(et, depth + 1, element=True)

    def _map(self, depth: int) -> None:
        n = self._size(self.size(), depth)
        if n:
            kinds = self.byte()
            self.count(2 * n)
            for _ in range(n):
                self.skip(kinds >> 4, depth + 1, True)
                self.skip(kinds & 15, depth + 1, True)

    def struct(self, want: _Fields, depth: int) -> dict[str, object]:
        """The fields named in ``want`` of the struct here, the rest skipped."""
        if depth > _DEPTH:
            raise Unreadable("Thrift structs nested too deep")
        out: dict[str, object] = {}
        seen: set[int] = set()
        fid = 0
        while True:
            head = self.byte()
            if head == _STOP:
                return out
            t, delta = head & 15, head >> 4
            fid = ((fid + delta + 0x8000) & 0xFFFF) - 0x8000 if delta else self.signed(16)
            if fid in seen:
                raise Unreadable(f"Thrift field {fid} given twice")
            seen.add(fid)
            self._field(want.get(fid), t, out, depth)

    def _field(
        self,
        spec: tuple[str, int, _Fields | None] | None,
        t: int,
        out: dict[str, object],
        depth: int,
    ) -> None:
        if spec is None:
            self.skip(t, depth)
            return
        name, kind, sub = spec
        self.count()
        if kind == _I32 and t == _I32:
            out[name] = self.signed(32)
        elif kind == _TRUE and t in _BOOL:
            out[name] = t == _TRUE
        elif kind == _STRUCT and t == _STRUCT and sub is not None:
            out[name] = self.struct(sub, depth + 1)
        else:
            raise Unreadable(f"Thrift field {name} of type {t}")


def _i32(*names: str) -> _Fields:
    return {i + 1: (n, _I32, None) for i, n in enumerate(names)}


_DATA_FIELDS = _i32("num_values", "encoding", "def_encoding", "rep_encoding")
_DICT_FIELDS = _i32("num_values", "encoding")
_V2_FIELDS = _i32("num_values", "num_nulls", "num_rows", "encoding", "def_length", "rep_length") | {
    7: ("is_compressed", _TRUE, None)
}
_HEADER: _Fields = _i32("kind", "uncompressed", "compressed", "crc") | {
    5: ("data", _STRUCT, _DATA_FIELDS),
    7: ("dictionary", _STRUCT, _DICT_FIELDS),
    8: ("data_v2", _STRUCT, _V2_FIELDS),
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
    cursor = _Thrift(b, i)
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
