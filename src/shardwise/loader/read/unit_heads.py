"""A unit of plain Parquet read in two parts, each row decoded once: its head (its first
rows, for a head window, :mod:`shardwise.plan.blocks`), then the rest.

The head's read opens the row group: fixed-size lists of numbers are decoded from their
pages for the head's rows only (:func:`~shardwise.formats.parquet._fixedlist.read_fixed_lists`
with ``rows``), so are wide binary values of a dictionary page (images: only the head's
values are copied out of the decompressed page,
:func:`~shardwise.formats.parquet._binarydict.read_binary_dicts`), the other columns by
Arrow's ``iter_batches`` in batches of the head's size, which stops after the head. The
open reader is kept (:class:`UnitParts`), and the rest's read continues it: Arrow's
decoders go on where they stopped (a dictionary already decoded is not decoded again) and
give the rest as one batch, the page readers decode the rest's pages. Only the one page
across the head's end of a fixed-size list column, and a binary column's dictionary page
(not kept between the parts), are decompressed twice, the second only where its values
are compressed (incompressible ones are copied from the page as stored). The binary page
reader maps the file for each part alone (:mod:`~shardwise.loader.read.part_map`), so a
unit of images waiting for its rest does not keep the pages its head touched resident; the
fixed-size lists' reader uses the unit's own mapping (mapping again cost the emb shape's
first epoch about a tenth). Lists of any length (token ids):
:mod:`~shardwise.loader.read.list_parts`.

Only plain Parquet reads take this path (no filter, no node cache, one dataset). Anything
else answers None, and the caller reads the whole unit and slices it, so a bad unit is
named by the whole read's :class:`~shardwise.errors.FormatError`: a read that fails, a
schema other than the dataset's, other row counts than the plan's, a rest whose head was
not read here (an epoch resumed past its head window), or one of a file cut shorter in
place since its head (its mapping would be read past the file's end). Until its rest is read, a unit
keeps its file open and Arrow's decoders their current pages and dictionaries, unless its
dictionary pages are large (over :data:`HOLD_BYTES`): it is then closed after its head,
and its rest is read whole and sliced.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.errors import FormatError, ShardwiseError
from shardwise.formats.parquet._binarydict import read_binary_dicts
from shardwise.formats.parquet._binarydict import reads as binary_reads
from shardwise.formats.parquet._fixedlist import page_reader_enabled, read_fixed_lists
from shardwise.formats.parquet.footers import open_parquet
from shardwise.index import DatasetIndex
from shardwise.loader.read.list_parts import head_lists, list_names, rest_lists
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.read.part_map import pages_source, shrunk
from shardwise.storage import open_arrow_input
from shardwise.storage.cache import NodeCache

__all__ = ["UnitParts", "unit_parts"]

# a unit is kept open for its rest while Arrow's dictionaries of it take at most this many
# bytes; a larger one (images of 100 KB in one dictionary page of 25 MB, when the page reader
# declines them) is let go, its memory serves the next unit's read, and its rest is read
# whole and sliced
HOLD_BYTES = 4 << 20
# what a failed part read may raise: the whole read then says what is wrong
_FAILURES = (pa.ArrowException, OSError, ValueError, IndexError, EOFError, ShardwiseError)


@dataclass
class _Open:
    """A unit whose head was read: its file, and where its columns' reads stopped."""

    source: Any
    pf: pq.ParquetFile
    group: int
    names: list[str]
    fixed: list[str]  # columns decoded from their pages (the others: by Arrow)
    lists: list[str] = field(default_factory=list)  # lists whose rest is read from pages
    batches: Iterator[pa.RecordBatch] | None = None
    left: list[pa.RecordBatch] = field(default_factory=list)  # read past the last part

    def close(self) -> None:
        self.batches = None
        self.pf.close()
        self.source.close()


def unit_parts(
    index: DatasetIndex | MixedIndex,
    columns: Sequence[str] | None,
    filter: object,
    cache: NodeCache | None,
    schema: pa.Schema,
) -> UnitParts | None:
    """A reader of ``index``'s units in two parts, or None when they are not plain
    Parquet read without a filter or node cache."""
    if not isinstance(index, DatasetIndex) or index.format != "parquet":
        return None
    if filter is not None or cache is not None:
        return None
    return UnitParts(index, columns, schema)


class UnitParts:
    """Reads units in two parts, a head and then the rest (see the module docstring).

    Args:
        index: a Parquet dataset.
        columns: the columns read (all when None).
        schema: the schema of the tables read (the dataset's, projected).
    """

    def __init__(
        self, index: DatasetIndex, columns: Sequence[str] | None, schema: pa.Schema
    ) -> None:
        self.index, self.schema = index, schema
        self.columns = list(columns) if columns is not None else None
        self.options = dict(index.storage_options or {})
        self._open: dict[int, _Open] = {}
        self._lock = threading.Lock()

    def head(self, u: int, rows: int) -> pa.Table | None:
        """Unit ``u``'s first ``rows`` rows as one contiguous table (None: read it whole);
        the unit stays open for :meth:`rest`."""
        unit = self.index.units[u]
        try:
            opened = _open(unit.path, unit.index, self.columns, self.options)
        except _FAILURES:
            return None
        try:
            table = self._head(opened, rows)
        except _FAILURES:
            table = None
        if table is None or rows >= unit.num_samples or _held(opened) > HOLD_BYTES:
            opened.close()
            return table
        with self._lock:
            old, self._open[u] = self._open.get(u), opened
        if old is not None:
            old.close()
        return table

    def rest(self, u: int, lo: int, rows: int) -> pa.Table | None:
        """Unit ``u``'s rows ``lo`` to ``lo + rows``, continuing the read of its head of
        ``lo`` rows (None: it was not read here, or the read fails: read it whole)."""
        with self._lock:
            opened = self._open.pop(u, None)
        if opened is None:
            return None
        if shrunk(opened.source):  # cut in place since the head: read anew, whole
            opened.close()
            return None
        try:
            fixed = _page_columns(opened, opened.fixed, (lo, lo + rows)) if opened.fixed else {}
            if len(fixed) != len(opened.fixed):
                return None  # a page of the rest declined: the whole read decides
            if opened.lists:
                fixed |= rest_lists(opened.pf, opened.source, opened.group, opened.lists, lo, rows)
            return self._table(opened, fixed, rows)
        except _FAILURES:
            return None
        finally:
            opened.close()

    def close(self) -> None:
        """Close the units whose rest was not read."""
        with self._lock:
            opened, self._open = list(self._open.values()), {}
        for o in opened:
            o.close()

    def _head(self, opened: _Open, rows: int) -> pa.Table | None:
        """The head: fixed-size lists and wide binary values from their pages, lists of
        any length by an Arrow reader of their own (:mod:`.list_parts`), then Arrow's first
        batch of the other columns, in batches of ``rows`` rows."""
        pf, names = opened.pf, opened.names
        fixed: dict[str, pa.Array] = {}
        if page_reader_enabled() and len(set(names)) == len(names):
            fixed = _page_columns(opened, names, (0, rows))
            opened.fixed = list(fixed)
            lists = list_names(pf, [n for n in names if n not in fixed])
            heads = head_lists(pf, opened.group, lists, rows)
            opened.lists, fixed = list(heads), fixed | heads
        others = [n for n in names if n not in fixed]
        if others:
            opened.batches = pf.iter_batches(
                batch_size=max(rows, 1),
                row_groups=[opened.group],
                columns=others,
                use_threads=False,
            )
        return self._table(opened, fixed, rows)

    def _table(self, opened: _Open, fixed: dict[str, pa.Array], rows: int) -> pa.Table | None:
        """The next ``rows`` rows of an open unit, its fixed-size lists ``fixed`` and the
        rest from Arrow's batches, as one contiguous table of the dataset's schema (None:
        other rows or another schema)."""
        arrow = _next_rows(opened, rows) if opened.batches is not None else None
        names = opened.names
        arrays = [fixed[n] if n in fixed else arrow.column(n) for n in names]  # type: ignore[union-attr]
        if any(len(a) != rows for a in arrays):
            return None
        full = opened.pf.schema_arrow
        target = pa.schema([full.field(n) for n in names], metadata=full.metadata)
        table = pa.Table.from_arrays(arrays, schema=target)
        return table if table.schema.equals(self.schema) else None


def _open(path: str, group: int, columns: list[str] | None, options: dict[str, Any]) -> _Open:
    """Row group ``group`` of ``path``, opened (nothing read but the footer)."""
    source = open_arrow_input(path, **options)
    try:
        pf = open_parquet(path, source)
        names = columns if columns is not None else pf.schema_arrow.names
        if not set(names) <= set(pf.schema_arrow.names):
            raise FormatError(f"columns {names} are not all in this file", path)
    except BaseException:
        source.close()
        raise
    return _Open(source, pf, group, list(names), [])


def _page_columns(opened: _Open, names: list[str], rows: tuple[int, int]) -> dict[str, pa.Array]:
    """The columns of ``names`` the page readers decode, rows ``rows`` of the unit: fixed-size
    lists of numbers, and wide binary values of a dictionary page."""
    pf, group = opened.pf, opened.group
    fixed = read_fixed_lists(pf, opened.source, group, names, rows)
    wide = [n for n in names if n not in fixed and binary_reads(pf.schema_arrow.field(n).type)]
    if not wide:
        return fixed
    with pages_source(opened.source) as source:
        return fixed | read_binary_dicts(pf, source, group, wide, rows)


def _held(opened: _Open) -> int:
    """The stored bytes of the dictionary pages of the columns Arrow reads (what its
    decoders keep, decoded, until the rest is read)."""
    group = opened.pf.metadata.row_group(opened.group)
    arrow = {n for n in opened.names if n not in opened.fixed and n not in opened.lists}
    held = 0
    for i in range(group.num_columns):
        chunk = group.column(i)
        if chunk.path_in_schema.split(".")[0] in arrow and chunk.has_dictionary_page:
            held += max(0, chunk.data_page_offset - (chunk.dictionary_page_offset or 0))
    return held


def _next_rows(opened: _Open, rows: int) -> pa.Table:
    """The next ``rows`` rows of Arrow's batches (fewer at the end), as one contiguous
    table; what was read past them is kept for the next part."""
    batches, got = opened.left, sum(b.num_rows for b in opened.left)
    opened.left = []
    assert opened.batches is not None
    # the rest in one batch: Arrow's reader takes its batch size at each batch (else in
    # batches of the head's size, put together below)
    resize = getattr(getattr(opened.pf, "reader", None), "set_batch_size", None)
    if resize is not None and rows > got:
        resize(rows - got)
    while got < rows:
        batch = next(opened.batches, None)
        if batch is None:
            break
        batches.append(batch)
        got += batch.num_rows
    if got > rows:
        last = batches[-1]
        keep = last.num_rows - (got - rows)
        batches[-1] = last.slice(0, keep)
        opened.left = [last.slice(keep)]
    return pa.Table.from_batches(batches, schema=_arrow_schema(opened)).combine_chunks()


def _arrow_schema(opened: _Open) -> pa.Schema:
    full = opened.pf.schema_arrow
    page = {*opened.fixed, *opened.lists}
    return pa.schema([full.field(n) for n in opened.names if n not in page])
