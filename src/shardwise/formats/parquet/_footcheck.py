"""What in a Parquet footer would end the process in Arrow's metadata accessors.

Arrow parses a footer and reads its files with its errors raised, but two of pyarrow's
metadata accessors call C++ code whose exceptions are not translated: a column chunk's
``compression`` with a codec Arrow does not know, and any column chunk of a row group
whose level histograms (``size_statistics``) disagree with the schema's levels. Both
terminate the interpreter (``SIGABRT``) where ``pq.read_table`` raises ``OSError``. A
chunk whose physical type is not its schema leaf's is refused too: Arrow refuses to read
it, and shardwise's page readers, which take the type from the schema, would not.
:func:`check_footer` walks the footer's Thrift (:mod:`._footwalk`: the fields it needs,
the rest stepped over) and raises :class:`~shardwise.errors.FormatError` naming the file,
the row group and the column before any of them is called. It runs once per file, where
the dataset is indexed, and gives the rows and compressed bytes of every row group from
the same walk, so an index asks Arrow for no column chunk (a Python object each).
"""

from __future__ import annotations

from typing import Any, cast

from shardwise.errors import FormatError
from shardwise.formats.parquet._footwalk import I32, I64, LENGTH, LIST, STRUCT, Spec, walk
from shardwise.formats.parquet._thrift import Unreadable

__all__ = ["CODECS_KNOWN", "FILE_SPEC", "check_footer"]

CODECS_KNOWN = range(8)  # UNCOMPRESSED .. LZ4_RAW: the codecs Arrow's enum has
_REQUIRED, _REPEATED = 0, 2

_SIZES: Spec = {2: ("rep", LENGTH, None), 3: ("def", LENGTH, None)}
_META: Spec = {
    1: ("type", I32, None),
    4: ("codec", I32, None),
    5: ("values", I64, None),
    7: ("bytes", I64, None),
    16: ("sizes", STRUCT, _SIZES),
}
_GROUP: Spec = {1: ("columns", LIST, {3: ("meta", STRUCT, _META)}), 3: ("rows", I64, None)}
_ELEMENT: Spec = {1: ("type", I32, None), 3: ("repetition", I32, None), 5: ("children", I32, None)}
#: the fields of a ``FileMetaData`` the check reads
FILE_SPEC: Spec = {2: ("schema", LIST, _ELEMENT), 4: ("row_groups", LIST, _GROUP)}


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


def check_footer(footer: bytes | memoryview, path: str) -> list[tuple[int, int]] | None:
    """Raise :class:`FormatError` for what in the Thrift ``footer`` (a ``FileMetaData``)
    Arrow's accessors cannot report (see the module docstring); a footer this walk does not
    Arrow's parser steps over is stepped over here too.

    Returns:
        the rows and the compressed bytes of each row group; None when the walk did not
        find them all (Arrow's accessors then give them).

    Raises:
        FormatError: the footer would end the process in Arrow's accessors, or the walk
            cannot read it (then it cannot say it would not).
    """
    try:
        meta = walk(bytes(footer), FILE_SPEC)
    except (Unreadable, IndexError, RecursionError) as exc:
        # Arrow parsed it, but its accessors are only safe once the walk has checked it
        raise FormatError(
            f"a footer whose Thrift cannot be checked ({exc})", path, "footer"
        ) from exc
    schema = cast(list[dict[str, object]], meta.get("schema", []))
    levels = _levels(schema)
    types = [e.get("type") for i, e in enumerate(schema) if i and not e.get("children")]
    sizes: list[tuple[int, int]] | None = []
    for g, group in enumerate(cast(list[dict[str, Any]], meta.get("row_groups", []))):
        nbytes: int | None = 0
        rows = group.get("rows")
        for c, chunk in enumerate(cast(list[dict[str, Any]], group.get("columns", []))):
            leaf = (levels[c], types[c]) if c < len(levels) == len(types) else None
            chunk_meta = chunk.get("meta", {})
            _check_chunk(chunk_meta, leaf, path, g, c)
            _check_values(chunk_meta.get("values"), rows, path, g, c)
            found = chunk_meta.get("bytes")
            nbytes = nbytes + found if nbytes is not None and found is not None else None
        if sizes is not None and nbytes is not None and rows is not None:
            sizes.append((rows, nbytes))
        else:
            sizes = None
    return sizes


def _check_values(values: int | None, rows: int | None, path: str, group: int, column: int) -> None:
    """A column chunk holds a value (or a null, or an empty list) for each row at least: a
    row group claiming more rows than a chunk's values is damage, refused here before a
    plan sizes its arrays by the claim."""
    if values is not None and rows is not None and values < rows:
        raise FormatError(
            f"{values:,} values where the row group counts {rows:,} rows",
            path,
            f"footer, row group {group}, column {column}",
        )


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
