"""Units of Parquet served by the node cache, read in two parts, each row decoded once.

:class:`~shardwise.loader.read.unit_heads.UnitParts` reads a head and continues the same
open row-group reader for the rest; on plain local Parquet it opens the file itself. Here
a remote unit's head read first leases its cache entries as the whole read does
(:meth:`~shardwise.loader.read.cached.UnitCache.serve`'s pieces: the whole file, or its
footer and the row group's range or its chosen columns' chunks, downloaded if no process
of the node has them) and opens the row group over those leased bytes
(:class:`~shardwise.storage.overlay.SparseFile`). The leases belong to that file: they
are held while the unit waits for its rest and released when it is closed, after its
rest, when it is let go after its head (``HOLD_BYTES``, or the held entries' bytes over
:data:`HELD_SHARE` of the cache's budget, so that units waiting for their rests never
keep the cache from making room), when the reading is closed, or when the file is
garbage collected (an iteration stopped early). A process killed meanwhile leaves lease
files the cache ignores (their owner is dead).

An entry downloaded for the head is held as the entry on disk (read on demand), not as
the downloaded bytes, so units waiting for their rests hold no stored bytes in memory.
A rest asked for while its head's read is under way on another thread waits for it (reads
start in the order they were asked for: the head's never waits for the rest's). Anything
that fails answers None, and the caller reads the unit whole (which names the error, as
it does without head windows).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import pyarrow as pa

from shardwise.errors import ShardwiseError
from shardwise.formats import Unit
from shardwise.index import DatasetIndex
from shardwise.loader.read.cached import UnitCache
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.read.unit_heads import UnitParts, unit_parts
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.entry import Extent
from shardwise.storage.overlay import Bytes, SparseFile, serving

__all__ = ["HELD_SHARE", "CachedParts", "part_reader"]

# units waiting for their rests hold leased entries of at most this share of the budget
HELD_SHARE = 0.25
# what leasing a unit's entries may raise: the whole read then tries again and says why
_FAILURES = (pa.ArrowException, OSError, ValueError, EOFError, ShardwiseError)


def part_reader(
    index: DatasetIndex | MixedIndex,
    columns: Sequence[str] | None,
    filter: object,
    cache: NodeCache | None,
    schema: pa.Schema,
) -> UnitParts | None:
    """A reader of ``index``'s units in two parts: plain Parquet read where it is, or
    through ``cache`` when some of its files are remote; None for anything else (a
    filter, another format, several sources)."""
    plain = unit_parts(index, columns, filter, None, schema)
    if plain is None or cache is None:
        return plain
    assert isinstance(index, DatasetIndex)  # unit_parts answers None for anything else
    if not any(UnitCache.cached(f.path) for f in index.files):
        return plain  # local files are read where they are, with or without a cache
    return CachedParts(index, columns, schema, cache)


class _LeasingUnits(UnitCache):
    """A :class:`UnitCache` whose leases yield an entry downloaded just now as the entry
    on disk (:class:`~shardwise.storage.cache.entry.EntryView`), not as its bytes."""

    @contextlib.contextmanager
    def _lease(self, url: str, extent: Extent) -> Iterator[Any]:
        with contextlib.ExitStack() as held:
            with contextlib.ExitStack() as fresh:
                data = fresh.enter_context(super()._lease(url, extent))
                if isinstance(data, (bytes, bytearray)) and data:
                    view = held.enter_context(self.cache.lease_if_cached(extent))
                    data = view if view is not None else data
                    if view is None:
                        held.push(fresh.pop_all())
                else:
                    held.push(fresh.pop_all())
            yield data


class _LeasedFile(SparseFile):
    """A :class:`SparseFile` of leased entries whose leases it releases when closed
    (explicitly, or when it is garbage collected)."""

    def __init__(
        self, size: int, pieces: list[tuple[int, Bytes]], fallback: Any, url: str, leases: Any
    ) -> None:
        super().__init__(size, pieces, fallback, url)
        self._leases: contextlib.ExitStack | None = leases

    def close(self) -> None:
        leases, self._leases = self._leases, None
        try:
            super().close()
        finally:
            if leases is not None:
                leases.close()


class CachedParts(UnitParts):
    """Reads units of a dataset with remote files in two parts through ``cache`` (see the
    module docstring); local files as :class:`UnitParts` does.

    Args:
        index: a Parquet dataset.
        columns: the columns read (all when None).
        schema: the schema of the tables read (the dataset's, projected).
        cache: the node cache.
    """

    def __init__(
        self,
        index: DatasetIndex,
        columns: Sequence[str] | None,
        schema: pa.Schema,
        cache: NodeCache,
    ) -> None:
        super().__init__(index, columns, schema)
        self.cache = cache
        self.units = _LeasingUnits(index, cache, columns)
        self.limit = int(cache.budget_bytes * HELD_SHARE)
        self._held: dict[int, int] = {}  # units waiting for their rests: their stored bytes
        self._heads: dict[int, threading.Event] = {}  # heads being read
        self._guard = threading.Lock()
        self._closed = False
        self._sizes = {f.path: f.size for f in index.files}

    def head(self, u: int, rows: int) -> pa.Table | None:
        """Unit ``u``'s first ``rows`` rows (None: read it whole); a remote unit's entries
        stay leased for :meth:`rest` while the unit is kept open."""
        done = threading.Event()
        with self._guard:
            self._heads[u] = done
        try:
            return self._head_of(u, rows)
        finally:
            done.set()
            with self._guard:
                self._heads.pop(u, None)

    def _head_of(self, u: int, rows: int) -> pa.Table | None:
        unit = self.index.units[u]
        if not UnitCache.cached(unit.path) or unit.path not in self._sizes:
            return super().head(u, rows)  # a local file: no lease
        leases = contextlib.ExitStack()
        try:
            file = self._file(unit, leases)
        except _FAILURES:  # the whole read tries again and names what is wrong
            leases.close()
            return None
        opened: list[_LeasedFile] = []

        def opener() -> _LeasedFile:
            opened.append(file)
            return file

        try:
            with serving(unit.path, opener):  # type: ignore[arg-type]
                table = super().head(u, rows)
        finally:
            if not opened:
                file.close()
        return self._keep(u, table)

    def _file(self, unit: Unit, leases: contextlib.ExitStack) -> _LeasedFile:
        """The unit's leased entries as one file of the object's size."""
        pieces = self.units._pieces(unit, leases)
        reader = partial(self.units._read_remote, unit.path)
        return _LeasedFile(self._sizes[unit.path], pieces, reader, unit.path, leases)

    def _keep(self, u: int, table: pa.Table | None) -> pa.Table | None:
        """Let unit ``u`` go after its head when the units waiting for their rests would
        hold more than :attr:`limit` bytes of entries, or after :meth:`close`."""
        size = self.index.units[u].num_bytes
        with self._guard:
            drop = u in self._open and (
                self._closed or sum(self._held.values()) + size > self.limit
            )
            if u in self._open and not drop:
                self._held[u] = size
        if drop:
            with self._lock:
                opened = self._open.pop(u, None)
            if opened is not None:
                opened.close()
        return table

    def rest(self, u: int, lo: int, rows: int) -> pa.Table | None:
        """Unit ``u``'s rows ``lo`` to ``lo + rows``, continuing its head's read (None:
        read it whole); its entries are released."""
        with self._guard:
            head = self._heads.get(u)
        if head is not None:  # its head's read, begun on another thread, is awaited
            head.wait()
        with self._guard:
            self._held.pop(u, None)
        return super().rest(u, lo, rows)

    def close(self) -> None:
        """Close the units whose rest was not read (their leases released); a head read
        after this lets its unit go at once."""
        with self._guard:
            self._closed = True
            self._held.clear()
        super().close()

    def held(self) -> list[int]:
        """The units kept open for their rests (their entries leased)."""
        with self._lock:
            return sorted(self._open)
