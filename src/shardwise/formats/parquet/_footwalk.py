"""A fast walk over a whole Parquet footer's Thrift, keeping a few fields.

:class:`~shardwise.formats.parquet._thrift.Thrift` reads page headers, a few dozen fields,
with every limit Arrow has; a footer holds hundreds of fields per column chunk (its
statistics, encodings, page index offsets), and the same walk cost 0.5 ms per chunk. This
one steps over what it does not keep in tight loops (a varint, a string, a list of numbers
without a call per element), about a tenth of that. It reads only footers Arrow has parsed
already, so it checks no limit of Arrow's; bytes it cannot walk raise
:class:`~shardwise.formats.parquet._thrift.Unreadable` (an unknown type, nesting deeper
than :data:`DEPTH`) or ``IndexError`` (past the end).

A spec maps field ids to ``(name, kind, sub)``: ``kind`` is :data:`I32` or :data:`I64` (the value),
:data:`STRUCT` (the struct's kept fields, by ``sub``), :data:`LIST` (a list of structs, each
by ``sub``) or :data:`LENGTH` (a list's length alone).
"""

from __future__ import annotations

from typing import Any

from shardwise.formats.parquet._thrift import Unreadable

__all__ = ["DEPTH", "I32", "I64", "LENGTH", "LIST", "STRUCT", "Spec", "walk"]

I32, I64, LIST, STRUCT, LENGTH = 5, 6, 9, 12, -1
DEPTH = 32
Spec = dict[int, "tuple[str, int, Spec | None]"]
_TRUE, _FALSE, _BYTE, _I16, _DOUBLE, _BINARY, _SET, _MAP = 1, 2, 3, 4, 7, 8, 10, 11
_VARINTS = (_I16, I32, I64)
_THRIFT_TYPE = {LENGTH: LIST}  # the Thrift type of a kept field of each kind (else the kind)


def _varint(b: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        c = b[i]
        i += 1
        out |= (c & 0x7F) << shift
        if c < 0x80:
            return out, i
        shift += 7


def _past_varint(b: bytes, i: int) -> int:
    while b[i] & 0x80:
        i += 1
    return i + 1


def _past(b: bytes, i: int, t: int, depth: int) -> int:
    """Where a value of type ``t`` at ``i`` ends (a struct field's: a bool has no byte)."""
    if t in _VARINTS:
        return _past_varint(b, i)
    if t == _BINARY:
        n, i = _varint(b, i)
        return i + n
    if t == STRUCT:
        return _past_struct(b, i, depth + 1)
    if t in (LIST, _SET):
        return _past_list(b, i, depth)[1]
    if t == _MAP:
        n, i = _varint(b, i)
        if n:
            kinds = b[i]
            i += 1
            for _ in range(n):
                i = _past_element(b, _past_element(b, i, kinds >> 4, depth), kinds & 15, depth)
        return i
    widths = {_TRUE: 0, _FALSE: 0, _BYTE: 1, _DOUBLE: 8}
    if t not in widths:
        raise Unreadable(f"unknown Thrift type {t}")
    return i + widths[t]


def _past_element(b: bytes, i: int, t: int, depth: int) -> int:
    return i + 1 if t in (_TRUE, _FALSE) else _past(b, i, t, depth)


def _list_head(b: bytes, i: int) -> tuple[int, int, int]:
    head = b[i]
    n, et = head >> 4, head & 15
    if n == 15:
        n, i = _varint(b, i + 1)
        return n, et, i
    return n, et, i + 1


def _past_list(b: bytes, i: int, depth: int) -> tuple[int, int]:
    """The list's length, and where it ends."""
    n, et, i = _list_head(b, i)
    if et in (_TRUE, _FALSE, _BYTE, _DOUBLE):
        return n, i + n * (8 if et == _DOUBLE else 1)
    if et in _VARINTS:
        for _ in range(n):
            while b[i] & 0x80:
                i += 1
            i += 1
        return n, i
    for _ in range(n):
        i = _past(b, i, et, depth)
    return n, i


def _past_struct(b: bytes, i: int, depth: int) -> int:
    return _struct(b, i, {}, depth)[1]  # every field stepped over


def _struct(b: bytes, i: int, spec: Spec, depth: int) -> tuple[dict[str, Any], int]:
    """The kept fields of the struct at ``i``, and where it ends."""
    if depth > DEPTH:
        raise Unreadable("Thrift structs nested too deep")
    out: dict[str, Any] = {}
    fid = 0
    while True:
        head = b[i]
        i += 1
        if head == 0:
            return out, i
        t, delta = head & 15, head >> 4
        if delta:
            fid += delta
        else:
            v, i = _varint(b, i)
            fid = (v >> 1) ^ -(v & 1)
        kept = spec.get(fid)
        if kept is not None and t != _THRIFT_TYPE.get(kept[1], kept[1]):
            kept = None  # a kept field of another type is stepped over, as Arrow's parser does
        if kept is None:  # stepped over: numbers and strings here, the rest by _past
            if t in _VARINTS:
                while b[i] & 0x80:
                    i += 1
                i += 1
            elif t == _BINARY:
                n, i = _varint(b, i)
                i += n
            elif t not in (_TRUE, _FALSE):
                i = _past(b, i, t, depth)
            continue
        out[kept[0]], i = _kept(b, i, t, kept, depth)


def _kept(
    b: bytes, i: int, t: int, kept: tuple[str, int, Spec | None], depth: int
) -> tuple[Any, int]:
    """The value of a kept field of type ``t`` at ``i``, and where it ends."""
    name, kind, sub = kept
    if kind == t and t in (I32, I64):
        v, i = _varint(b, i)
        return (v >> 1) ^ -(v & 1), i
    if kind == STRUCT and t == STRUCT and sub is not None:
        return _struct(b, i, sub, depth + 1)
    if kind == LENGTH and t == LIST:
        return _past_list(b, i, depth)
    if kind == LIST and t == LIST and sub is not None:
        n, et, i = _list_head(b, i)
        if et != STRUCT:
            raise Unreadable(f"Thrift field {name} is no list of structs")
        items = []
        for _ in range(n):
            item, i = _struct(b, i, sub, depth + 1)
            items.append(item)
        return items, i
    raise Unreadable(f"Thrift field {name} of type {t}")


def walk(footer: bytes, spec: Spec) -> dict[str, Any]:
    """The fields ``spec`` keeps of the struct ``footer`` holds (a ``FileMetaData``)."""
    return _struct(footer, 0, spec, 0)[0]
