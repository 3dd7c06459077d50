"""How a dataset's units are read and what they become: :class:`Reading`, the one
description both paths build batches from (the in-process path on its threads, the
DataLoader-worker path on one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.formats import OnError
from shardwise.index import DatasetIndex
from shardwise.loader.batches.convert import Padding
from shardwise.loader.batches.memory import WindowMemory
from shardwise.loader.read.headstart import ahead_budget, downloads_ahead
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.read.prefetch import Prefetcher
from shardwise.loader.read.unit_tables import table_loader
from shardwise.storage.cache import NodeCache

__all__ = ["BatchFormat", "Reading"]

BatchFormat = Literal["numpy", "torch", "arrow"]


@dataclass(frozen=True)
class Reading:
    """How a dataset's units are read and what they become.

    Attributes:
        index: the dataset (a :class:`MixedIndex` for several sources).
        columns, filter, on_error: projection, row filter and bad-record policy.
        batch_format: ``None`` (per-sample dicts) or a batch format.
        batch_size: samples per batch.
        interleave: units per window (bounds how far units are read ahead).
        prefetch_bytes: read-ahead budget.
        pad_to: padding of variable-length list columns in numpy/torch batches.
        num_threads: threads of the in-process path.
        pin_memory: pin torch batches of the in-process path (CUDA only).
        cache: the node-local cache remote units are read through, if any.
        memory: the dataset's window memory, kept for its next windows and epochs.
    """

    index: DatasetIndex | MixedIndex
    columns: list[str] | None
    filter: pc.Expression | None
    on_error: OnError
    batch_format: BatchFormat | None
    batch_size: int
    interleave: int
    prefetch_bytes: int
    pad_to: Padding = None
    num_threads: int = 1
    pin_memory: bool = False
    cache: NodeCache | None = None
    memory: WindowMemory | None = None

    def piece_rows(self, rows: int) -> int:
        """Rows gathered in one go: whole batches, about ``rows``."""
        return max(1, rows // self.batch_size) * self.batch_size

    def loader(self) -> Callable[[int], pa.Table]:
        """A function reading one unit as one contiguous table; a unit that cannot be
        read is a :class:`FormatError` naming its file and its place (row group, ...)."""
        return table_loader(
            self.index, self.columns, self.filter, self.on_error, self.cache, self.batch_format
        )

    def first_piece(self, rows: int) -> int | None:
        """Rows of the first piece, for a first window of ``rows`` (None: as any piece)."""
        return None

    def unit_rows(self, u: int) -> int:
        """Unit ``u``'s rows as indexed (an upper bound of those read)."""
        return self.index.units[u].num_samples

    def stored_unit(self, u: int) -> int | None:
        """The unit whose stored bytes reading ``u`` downloads (None: nothing new)."""
        return u

    def size(self, u: int) -> int:
        """A unit's estimated decoded bytes (twice its stored size)."""
        return 2 * self.index.units[u].num_bytes

    def schema(self) -> pa.Schema:
        """The schema of the columns read."""
        schema = self.index.schema
        if self.columns is None:
            return schema
        return pa.schema([schema.field(c) for c in self.columns])

    def prefetcher(
        self, load: Callable[[int], Any] | None = None, max_ahead: int | None = None, **kwargs: Any
    ) -> Prefetcher[int, Any]:
        """Reads units ahead, across window boundaries, under ``prefetch_bytes``, with
        ``load`` (default: :meth:`loader`'s), at most ``max_ahead`` at a time (default:
        two windows' worth); with a node cache, the units after those are downloaded
        into it meanwhile (their stored bytes under ``prefetch_bytes`` too)."""
        cols = self.columns if self.filter is None else None
        fetch = downloads_ahead(self.index, self.cache, cols)  # None without a node cache

        def ahead(k: int) -> None:
            u = self.stored_unit(k)
            if u is not None and fetch is not None:
                fetch(u)

        def ahead_size(k: int) -> int:
            u = self.stored_unit(k)
            return 0 if u is None else self.index.units[u].num_bytes

        return Prefetcher(
            load or self.loader(),
            self.size,
            budget_bytes=self.prefetch_bytes,
            max_ahead=max_ahead or 2 * self.interleave + 2,
            ahead=ahead if fetch is not None else None,
            ahead_size=ahead_size,
            ahead_bytes=ahead_budget(self.cache, self.prefetch_bytes),
            **kwargs,
        )
