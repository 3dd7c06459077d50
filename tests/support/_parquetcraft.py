"""Parquet files crafted byte by byte: a Thrift compact codec over generic values, the
pages of a one-column file, and the damage the page-reader tests make to its headers.

A struct is a list of ``[field id, compact type, value]``; a list is ``(element type,
[values])``; ints, bools and bytes are themselves. Encoding what was decoded gives the
same bytes back, so a header can be changed field by field and written again.
"""

from __future__ import annotations

import io
import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

STOP, TRUE, FALSE, BYTE, I16, I32, I64, DOUBLE, BINARY, LIST, SET, MAP, STRUCT = range(13)
INTS = (I16, I32, I64)


def uvarint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def zigzag(v: int) -> int:
    return (v << 1) ^ (v >> 63)


class Reader:
    """Decodes Thrift compact values from ``b``, starting at ``i``."""

    def __init__(self, b: bytes, i: int = 0) -> None:
        self.b, self.i = b, i

    def varint(self) -> int:
        out = shift = 0
        while True:
            c = self.b[self.i]
            self.i += 1
            out |= (c & 0x7F) << shift
            shift += 7
            if c < 0x80:
                return out

    def value(self, t: int, element: bool = False) -> Any:
        if t in (TRUE, FALSE):
            if element:
                self.i += 1
                return self.b[self.i - 1] == 1
            return t == TRUE
        if t == BYTE:
            self.i += 1
            return self.b[self.i - 1]
        if t in INTS:
            v = self.varint()
            return (v >> 1) ^ -(v & 1)
        if t == DOUBLE:
            self.i += 8
            return self.b[self.i - 8 : self.i]
        if t == BINARY:
            n = self.varint()
            self.i += n
            return self.b[self.i - n : self.i]
        if t in (LIST, SET):
            head = self.b[self.i]
            self.i += 1
            n, et = head >> 4, head & 15
            if n == 15:
                n = self.varint()
            return (et, [self.value(et, True) for _ in range(n)])
        if t == STRUCT:
            return self.struct()
        raise ValueError(f"type {t}")

    def struct(self) -> list[list[Any]]:
        fields: list[list[Any]] = []
        fid = 0
        while True:
            head = self.b[self.i]
            self.i += 1
            if head == STOP:
                return fields
            t, delta = head & 15, head >> 4
            fid = fid + delta if delta else (lambda v: (v >> 1) ^ -(v & 1))(self.varint())
            fields.append([fid, t, self.value(t)])


def encode(t: int, v: Any, element: bool = False) -> bytes:
    """The compact encoding of value ``v`` of type ``t``."""
    if t in (TRUE, FALSE):
        return (b"\x01" if v else b"\x02") if element else b""
    if t == BYTE:
        return bytes([v & 0xFF])
    if t in INTS:
        return uvarint(zigzag(v) & (2**64 - 1))
    if t == DOUBLE:
        return bytes(v)
    if t == BINARY:
        return uvarint(len(v)) + bytes(v)
    if t in (LIST, SET):
        et, items = v
        head = bytes([len(items) << 4 | et]) if len(items) < 15 else bytes([0xF0 | et])
        size = b"" if len(items) < 15 else uvarint(len(items))
        return head + size + b"".join(encode(et, x, True) for x in items)
    if t == STRUCT:
        return encode_struct(v)
    raise ValueError(f"type {t}")


def encode_struct(fields: list[list[Any]]) -> bytes:
    out = bytearray()
    last = 0
    for fid, t, v in fields:
        wire = (TRUE if v else FALSE) if t in (TRUE, FALSE) else t
        if 0 < fid - last <= 15:
            out.append((fid - last) << 4 | wire)
        else:
            out.append(wire)
            out += uvarint(zigzag(fid) & 0xFFFF)
        last = fid
        out += encode(t, v)
    out.append(STOP)
    return bytes(out)


def get(fields: list[list[Any]], fid: int) -> list[Any]:
    """The field ``fid`` of a decoded struct (its [id, type, value] entry)."""
    return next(f for f in fields if f[0] == fid)


@dataclass
class Crafted:
    """A one-column, one-row-group Parquet file cut into what the tests change."""

    pages: list[tuple[list[list[Any]], bytes]]  # each page: its header and its body
    footer: list[list[Any]]  # FileMetaData
    start: int = 4  # where the chunk starts
    extra: bytes = b""  # bytes appended to the chunk after its pages
    past_eof: int = 0  # bytes the footer claims beyond the chunk
    codec: str = "snappy"
    meta: dict[str, Any] = field(default_factory=dict)

    def build(self) -> bytes:
        """The file: the pages (headers re-encoded), the footer with the chunk's size."""
        chunk = b"".join(encode_struct(h) + b for h, b in self.pages) + self.extra
        col = get(get(get(self.footer, 4)[2][1][0], 1)[2][1][0], 3)[2]  # meta_data
        get(col, 7)[2] = len(chunk) + self.past_eof  # total_compressed_size
        footer = encode_struct(self.footer)
        return b"PAR1" + chunk + footer + len(footer).to_bytes(4, "little") + b"PAR1"


def craft(
    rows: int = 64, k: int = 4, codec: str = "snappy", version: str = "1.0", **opts: Any
) -> Crafted:
    """A pyarrow file of one ``fixed_size_list<float>[k]`` column without nulls, cut up."""
    rng = np.random.default_rng(rows * 31 + k)
    flat = pa.array(rng.standard_normal(rows * k).astype(np.float32))
    table = pa.table({"emb": pa.FixedSizeListArray.from_arrays(flat, k)})
    buf = io.BytesIO()
    pq.write_table(
        table, buf, compression=codec, data_page_version=version, row_group_size=rows, **opts
    )
    data = buf.getvalue()
    n = int.from_bytes(data[-8:-4], "little")
    footer = Reader(data[-8 - n : -8]).struct()
    col = get(get(get(footer, 4)[2][1][0], 1)[2][1][0], 3)[2]
    size = get(col, 7)[2]
    starts = [get(col, 9)[2]] + [f[2] for f in col if f[0] == 11]
    start = min(s for s in starts if s > 0)
    pages, at = [], start
    while at < start + size:
        r = Reader(data, at)
        header = r.struct()
        body = data[r.i : r.i + get(header, 3)[2]]
        pages.append((header, body))
        at = r.i + len(body)
    crafted = Crafted(pages, footer, start, codec=codec.upper())
    crafted.meta["table"] = table
    if start != 4:
        raise ValueError("the chunk does not start after the magic")
    return crafted


def data_pages(c: Crafted) -> list[int]:
    """Positions of the data pages (v1 or v2) among ``c.pages``."""
    return [i for i, (h, _) in enumerate(c.pages) if get(h, 1)[2] in (0, 3)]


def gzip_member(raw: bytes) -> bytes:
    z = zlib.compressobj(6, zlib.DEFLATED, 31)
    return z.compress(raw) + z.flush()
