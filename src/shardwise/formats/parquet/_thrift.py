"""The Thrift compact protocol, as strictly as Arrow's reader takes it, for page headers.

A cursor (:class:`Thrift`) reads the fields a caller names, each of its exact type, and
steps over the rest; a field given twice, a value out of its type's range, a string or
container over parquet-cpp's limits (strings of at most 100,000,000 bytes, containers of
at most 1,000,000 elements, a page header of at most 16 MiB) or more than ``MAX_ITEMS``
fields and elements read one by one raises :class:`Unreadable`. Strings and lists of
fixed-size elements are stepped over whole, so no input costs Python time per byte.
"""

from __future__ import annotations

__all__ = [
    "I32",
    "MAX_HEADER",
    "MAX_ITEMS",
    "STRUCT",
    "TRUE",
    "Fields",
    "Thrift",
    "Unreadable",
    "varint",
]

_STOP, _TRUE, _FALSE, _BYTE, _I16, _I32, _I64, _DOUBLE, _BINARY, _LIST, _SET, _MAP, _STRUCT = range(
    13
)
_BOOL = (_TRUE, _FALSE)
I32, STRUCT, TRUE = _I32, _STRUCT, _TRUE  # the types of the fields a caller keeps (TRUE: bool)
_WIDTH = {_TRUE: 1, _FALSE: 1, _BYTE: 1, _DOUBLE: 8}  # elements a list steps over whole
_DEPTH = 16  # nested structs deeper than this are not a page header
MAX_HEADER = 16 * 1024 * 1024  # parquet-cpp's kDefaultMaxPageHeaderSize
MAX_STRING = 100 * 1000 * 1000  # parquet-cpp's kDefaultThriftStringSizeLimit
MAX_CONTAINER = 1000 * 1000  # parquet-cpp's kDefaultThriftContainerSizeLimit
MAX_ITEMS = 4096  # fields and elements read one by one in a header (a real one: a few dozen)


class Unreadable(ValueError):
    """Bytes this reader does not read (damaged, hostile or simply another layout). It
    never reaches a user: the caller leaves the column to Arrow, which reads it or
    reports the damage as a ``FormatError``."""


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
Fields = dict[int, "tuple[str, int, Fields | None]"]


class Thrift:
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

    def struct(self, want: Fields, depth: int) -> dict[str, object]:
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
        spec: tuple[str, int, Fields | None] | None,
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
