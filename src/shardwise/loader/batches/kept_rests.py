"""Units read whole for their heads keep their rests until the rest window takes them.

Where a unit cannot be read in two parts (tar shards, JSONL, a filter, several sources:
:class:`~shardwise.loader.batches.heads.PartReading` reads the whole unit and slices it),
the head's whole read would otherwise be made again for the rest. :class:`KeptRests`
keeps the decoded rest of the head's read (a slice of the same table: its buffers stay
alive, nothing is copied) until the rest is asked for, while the kept tables take at most
``budget_bytes``; past that, a rest is read whole again. A rest asked for while its
head's read is under way on another thread waits for it (reads start in the order they
were asked for, so the head's never waits for the rest's). A rest is taken once; the
reading's close (the epoch's windows closed) drops what is left.

Only tar shards and JSONL keep their rests (:func:`keeps_rests`). Parquet read whole (under
a filter, from several sources, a unit let go after its head) reads its rest again: with
its rests kept, an epoch of 1 GB of filtered Parquet (default ``shuffle_bytes`` and
``prefetch_bytes``) peaked at 1.36-1.41 GB over its start, against 0.94-0.97 GB read twice
and a bound of 1.0 GB (``benchmarks/NOTES.md``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa

from shardwise.index import DatasetIndex
from shardwise.loader.read.mixed import MixedIndex

__all__ = ["SHARE", "KeptRests", "keeps_rests"]

# the kept rests take at most this share of the reading's ``prefetch_bytes``
SHARE = 1.0


class KeptRests:
    """Parts of units read whole, each unit read once while its rest fits the budget.

    Args:
        whole: reads one unit whole (one contiguous table).
        budget_bytes: most buffer bytes of the kept tables (0: keep nothing).
        keeps: whether unit ``u``'s rest may be kept (else it is read again).
    """

    def __init__(
        self,
        whole: Callable[[int], pa.Table],
        budget_bytes: int,
        keeps: Callable[[int], bool] = lambda u: True,
    ) -> None:
        self.whole = whole
        self.budget_bytes = budget_bytes
        self.keeps = keeps
        self.reads = 0  # whole reads made
        self._kept: dict[int, tuple[pa.Table, int]] = {}
        self._heads: dict[int, threading.Event] = {}  # heads being read
        self._bytes = 0
        self._lock = threading.Lock()
        self._closed = False

    def part(self, u: int, lo: int, hi: int, n: int) -> pa.Table:
        """Rows ``lo`` to ``hi`` of unit ``u`` (of ``n`` rows): a head (``lo == 0``) from
        a whole read whose rest ``[hi, n)`` is kept if it fits; a rest from what its head
        kept (waiting for its head's read if another thread is making it), else from a
        whole read."""
        if lo > 0:
            kept = self._take(u)
            if kept is not None:
                return kept.slice(0, hi - lo)
            return self._read(u).slice(lo, hi - lo)
        if hi >= n or not self.keeps(u):
            return self._read(u).slice(0, hi)
        done = threading.Event()
        with self._lock:
            self._heads[u] = done
        try:
            table = self._read(u)
            self._keep(u, table, hi)
        finally:
            done.set()
            with self._lock:
                self._heads.pop(u, None)
        return table.slice(0, hi)

    def _take(self, u: int) -> pa.Table | None:
        """Unit ``u``'s kept rest, once its head's read (if one is under way) is done."""
        with self._lock:
            head = self._heads.get(u)
        if head is not None:
            head.wait()  # a read started before this one: it never waits for this thread
        with self._lock:
            kept = self._kept.pop(u, None)
            self._bytes -= kept[1] if kept is not None else 0
        return kept[0] if kept is not None else None

    def _read(self, u: int) -> pa.Table:
        table = self.whole(u)
        with self._lock:
            self.reads += 1
        return table

    def _keep(self, u: int, table: pa.Table, hi: int) -> None:
        size = table.get_total_buffer_size()
        with self._lock:
            if self._closed or u in self._kept or self._bytes + size > self.budget_bytes:
                return
            self._kept[u] = (table.slice(hi), size)
            self._bytes += size

    def held_bytes(self) -> int:
        """Buffer bytes of the tables kept now."""
        with self._lock:
            return self._bytes

    def close(self) -> None:
        """Drop the kept rests; heads read after this keep nothing."""
        with self._lock:
            self._closed = True
            self._kept.clear()
            self._bytes = 0


def keeps_rests(index: DatasetIndex | MixedIndex) -> Callable[[int], bool]:
    """Whether unit ``u`` of ``index`` keeps its rest: tar shards and JSONL do, Parquet
    does not (see the module docstring)."""
    if isinstance(index, DatasetIndex):
        keeps = index.format != "parquet"
        return lambda u: keeps
    formats = [ix.format != "parquet" for ix in index.indexes]
    return lambda u: formats[index.locate(u)[0]]
