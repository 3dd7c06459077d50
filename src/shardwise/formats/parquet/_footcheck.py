"""What in a Parquet footer would end the process in Arrow's metadata accessors.

Arrow parses a footer and reads its files with its errors raised, but two of pyarrow's
metadata accessors call C++ code whose exceptions are not translated: a column chunk's
``compression`` with a codec Arrow does not know, and any column chunk of a row group
whose level histograms (``size_statistics``) disagree with the schema's levels. Both
terminate the interpreter (``SIGABRT``) where ``pq.read_table`` raises ``OSError``. A
chunk whose physical type is not its schema leaf's is refused too: Arrow refuses to read
it, and shardwise's page readers, which take the type from the schema, would not.
:func:`check_footer` walks the footer's Thrift (only the fields it needs, the rest stepped
over) and raises :class:`~shardwise.errors.FormatError` naming the file, the row group and
the column before any of them is called. It runs once per file, where the dataset is
indexed.
"""

from __future__ import annotations

from typing import Any, cast

from shardwise.errors import FormatError
from shardwise.formats.parquet._thrift import I32, STRUCT, Fields, Thrift, Unreadable

__all__ = ["CODECS_KNOWN", "check_footer"]

CODECS_KNOWN = range(8)  # UNCOMPRESSED .. LZ4_RAW: the codecs Arrow's enum has
_LIST, _LEN = 9, -1  # a list of structs kept; a list's length alone
_REQUIRED, _REPEATED = 0, 2

_Spec = tuple[str, int, Fields | None] | None  # a field kept (Thrift._field's spec)
_SIZES: Fields = {2: ("rep", _LEN, None), 3: ("def", _LEN, None)}
_META: Fields = {1: ("type", I32, None), 4: ("codec", I32, None), 16: ("sizes", STRUCT, _SIZES)}
_CHUNK: Fields = {3: ("meta", STRUCT, _META)}
_GROUP: Fields = {1: ("columns", _LIST, _CHUNK)}
_ELEMENT: Fields = {
    1: ("type", I32, None),
    3: ("repetition", I32, None),
    5: ("children", I32, None),
}
_FILE: Fields = {2: ("schema", _LIST, _ELEMENT), 4: ("row_groups", _LIST, _GROUP)}


class _Footer(Thrift):
    """The Thrift cursor over a whole footer: no page header's limits (every field or
    element takes a byte at least, so the work is bounded by the footer's size), lists of
    structs and lists' lengths kept too."""

    def __init__(self, b: memoryview) -> None:
        super().__init__(b, 0)
        self.end, self.limit = len(b), len(b) + 16

    def count(self, n: int = 1) -> None:
        self.items += n
        if self.items > self.limit:
            raise Unreadable("more Thrift items than the footer has bytes")

    def _field(self, spec: _Spec, t: int, out: dict[str, object], depth: int) -> None:
        if spec is None or spec[1] not in (_LIST, _LEN) or t != _LIST:
            super()._field(spec, t, out, depth)
            return
        name, kind, sub = spec
        head = self.byte()
        n, et = head >> 4, head & 15
        n = self._size(self.size() if n == 15 else n, depth)
        if kind == _LEN:
            out[name] = n
            self._skip_elements(n, et, depth)
            return
        if et != STRUCT or sub is None:
            raise Unreadable(f"Thrift field {name} is no list of structs")
        self.count(n)
        out[name] = [self.struct(sub, depth + 1) for _ in range(n)]

    def _skip_elements(self, n: int, et: int, depth: int) -> None:
        self.count(n)
        for _ in range(n):
            self.skip(et, depth + 1, element=True)


def _levels(schema: list[dict[str, object]]) -> list[tuple[int, int]]:
    """``(max definition level, max repetition level)`` of every leaf, in column order."""
    out: list[tuple[int, int]] = []
    stack: list[tuple[int, int, int]] = []  # (children left, def, rep) of open groups
    for i, element in enumerate(schema):
        rep = cast(int, element.get("repetition", _REQUIRED))
        d, r = stack[-1][1:] if stack else (0, 0)
        if i:  # the root's own repetition does not count
            d, r = d + (rep != _REQUIRED), r + (rep == _REPEATED)
        children = cast(int, element.get("children", 0))
        if stack:
            left, pd, pr = stack.pop()
            if left > 1:
                stack.append((left - 1, pd, pr))
        if children > 0:
            stack.append((children, d, r))
        elif i:
            out.append((d, r))
    return out


def check_footer(footer: bytes | memoryview, path: str) -> None:
    """Raise :class:`FormatError` for what in the Thrift ``footer`` (a ``FileMetaData``)
    Arrow's accessors cannot report (see the module docstring); a footer this walk does not
    read is left to Arrow, which parsed it already or reports it."""
    try:
        meta = _Footer(memoryview(footer)).struct(_FILE, 0)
    except Unreadable:
        return
    schema = cast(list[dict[str, object]], meta.get("schema", []))
    levels = _levels(schema)
    types = [e.get("type") for i, e in enumerate(schema) if i and not e.get("children")]
    for g, group in enumerate(cast(list[dict[str, Any]], meta.get("row_groups", []))):
        for c, chunk in enumerate(cast(list[dict[str, Any]], group.get("columns", []))):
            leaf = (levels[c], types[c]) if c < len(levels) == len(types) else None
            _check_chunk(chunk.get("meta", {}), leaf, path, g, c)


def _check_chunk(
    meta: dict[str, object],
    leaf: tuple[tuple[int, int], object] | None,
    path: str,
    group: int,
    column: int,
) -> None:
    """One column chunk's codec, and against its schema leaf (``leaf``: its levels and
    physical type) its physical type (which Arrow refuses to read otherwise, and the page
    readers would take from the schema) and level histograms."""
    where = f"footer, row group {group}, column {column}"
    codec = meta.get("codec")
    if codec is not None and codec not in CODECS_KNOWN:
        raise FormatError(f"unknown compression codec {codec}", path, where)
    if leaf is None:
        return
    levels, kind = leaf
    if meta.get("type") is not None and kind is not None and meta["type"] != kind:
        raise FormatError(
            f"the chunk's physical type {meta['type']} is not its schema's {kind}", path, where
        )
    sizes = cast(dict[str, int] | None, meta.get("sizes"))
    if not isinstance(sizes, dict):
        return
    for name, key, most in (("definition", "def", levels[0]), ("repetition", "rep", levels[1])):
        n = sizes.get(key, 0)
        if n and n != most + 1:
            raise FormatError(
                f"a {name} level histogram of {n} values where the schema's levels give {most + 1}",
                path,
                where,
            )
