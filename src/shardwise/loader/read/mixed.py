"""Many sources read as one dataset: their units concatenated, each read from its source.

Every :class:`~shardwise.loader.source.Source` is indexed on its own (it may have its own
format and storage options); their units are concatenated in the order given (a
:class:`MixedIndex`), so the plan addresses them as one dataset and
:class:`~shardwise.plan.Mixing` knows which units belong to which source. Reading a unit
finds its source and its file there (:class:`MixedReader`) and gives the table the
dataset's aligned columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError
from shardwise.formats import OnError, Quarantine, Unit, unit_place
from shardwise.index import DatasetIndex, FileEntry
from shardwise.loader.read.units import UnitReader, count_rows
from shardwise.loader.source import Source
from shardwise.plan import Mixing
from shardwise.storage.cache import NodeCache

__all__ = ["MixedIndex", "MixedReader", "place_of", "read_counts", "unit_reader"]


@dataclass
class MixedIndex:
    """The units of several sources, concatenated, with the dataset's aligned schema.

    Attributes:
        sources: the sources, in order.
        indexes: each source's own index.
        renames: per source, ``{dataset column: source column}`` for every aligned column.
        schema: the dataset's columns (unified types).
        offsets: source ``s`` owns units ``offsets[s]:offsets[s + 1]``.
    """

    sources: list[Source]
    indexes: list[DatasetIndex]
    renames: list[dict[str, str]]
    schema: pa.Schema
    offsets: tuple[int, ...]
    units: list[Unit] = field(init=False, repr=False)
    files: list[FileEntry] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.units = [u for ix in self.indexes for u in ix.units]
        self.files = [f for ix in self.indexes for f in ix.files]

    @property
    def num_units(self) -> int:
        return self.offsets[-1]

    @property
    def num_samples(self) -> int:
        return sum(ix.num_samples for ix in self.indexes)

    def counts(self) -> np.ndarray:
        """Samples per unit of all sources."""
        return np.concatenate([ix.counts() for ix in self.indexes]).astype(np.int64)

    def locate(self, unit: int) -> tuple[int, int]:
        """``(source, unit inside that source)`` of a unit of the dataset."""
        s = int(np.searchsorted(self.offsets, unit, side="right")) - 1
        return s, unit - self.offsets[s]

    def mixing(self, epoch_size: int | None, batching: str) -> Mixing:
        """The sources' :class:`~shardwise.plan.Mixing`."""
        return Mixing(self.offsets, tuple(s.rule for s in self.sources), epoch_size, batching)


class MixedReader:
    """Reads a unit of a :class:`MixedIndex` from its source, with the dataset's columns
    (picklable; same interface as :class:`~shardwise.loader.read.units.UnitReader`)."""

    def __init__(
        self,
        index: MixedIndex,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        on_error: OnError = "raise",
        cache: NodeCache | None = None,
    ) -> None:
        names = index.schema.names
        if columns is not None:
            missing = [c for c in columns if c not in names]
            if missing:
                raise ConfigError(f"unknown columns {missing}; the sources have {names}")
        self.index = index
        self.columns = list(columns) if columns is not None else list(names)
        self.schema = pa.schema([index.schema.field(c) for c in self.columns])
        self.readers = [
            UnitReader(ix, [ren[c] for c in self.columns], filter, on_error, cache)
            for ix, ren in zip(index.indexes, index.renames)
        ]
        self.quarantine = Quarantine()

    def read(self, unit_id: int) -> pa.Table:
        """Unit ``unit_id`` of the dataset: read from its source, renamed, cast to the schema."""
        s, local = self.index.locate(unit_id)
        reader = self.readers[s]
        table = reader.read(local)
        self.quarantine.merge(reader.quarantine)
        reader.quarantine = Quarantine()
        table = table.rename_columns(self.columns)
        return table if table.schema == self.schema else table.cast(self.schema)


def unit_reader(
    index: DatasetIndex | MixedIndex,
    columns: Sequence[str] | None,
    filter: pc.Expression | None,
    on_error: OnError,
    cache: NodeCache | None = None,
) -> UnitReader | MixedReader:
    """The reader of ``index``'s units (remote ones through ``cache``, if given)."""
    if isinstance(index, MixedIndex):
        return MixedReader(index, columns, filter, on_error, cache)
    return UnitReader(index, columns, filter, on_error, cache)


def place_of(index: DatasetIndex | MixedIndex, unit: int) -> str:
    """Where a unit sits in its file, for error messages."""
    if isinstance(index, MixedIndex):
        s, local = index.locate(unit)
        return unit_place(index.indexes[s].format, index.indexes[s].units[local])
    return unit_place(index.format, index.units[unit])


def read_counts(
    index: DatasetIndex | MixedIndex, filter: pc.Expression | None, on_error: OnError
) -> tuple[np.ndarray, Quarantine]:
    """Samples per unit that reading yields: after ``filter`` and after quarantine under
    ``"skip"`` (counted, cached), else the indexes' counts."""
    if filter is None and on_error != "skip":
        return index.counts(), Quarantine()
    if not isinstance(index, MixedIndex):
        return count_rows(index, filter, on_error)
    quarantine, parts = Quarantine(), []
    for ix in index.indexes:
        counts, q = count_rows(ix, filter, on_error)
        parts.append(counts)
        quarantine.merge(q)
    return np.concatenate(parts).astype(np.int64), quarantine
