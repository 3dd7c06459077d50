"""Many sources in one ``StreamingDataset``: open them, align their columns, read them.

Every :class:`Source` is indexed on its own (it may have its own format and storage
options); their units are concatenated in the order given (a :class:`MixedIndex`), so the
plan addresses them as one dataset and :class:`~shardwise.plan.Mixing` knows which units
belong to which source. Reading a unit finds its source and its file there
(:class:`MixedReader`) and gives the table the dataset's aligned columns.

Columns align by name. Sources whose columns differ are refused unless the dataset's
``columns=`` picks columns every source has, or a source maps its own names onto the
dataset's (``Source(path, columns={"text": "content"})``: the dataset's ``text`` is this
source's ``content``). Types of one column are unified (``int32`` and ``int64`` become
``int64``); types that cannot be unified are refused, naming sources and column.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError, PlanError
from shardwise.formats import OnError, Quarantine, Unit, check_format_options, unit_place
from shardwise.index import OPEN_OPTIONS, DatasetIndex, FileEntry
from shardwise.index import index_dataset as open_dataset
from shardwise.loader.reader import UnitReader, count_rows
from shardwise.plan import Mixing, Rule
from shardwise.storage.cache import NodeCache

__all__ = [
    "MixedIndex",
    "MixedReader",
    "Source",
    "check_not_empty",
    "open_reader",
    "open_source",
    "place_of",
    "read_counts",
]


class Source:
    """One source of a mixed :class:`~shardwise.StreamingDataset`.

    Give at most one of ``weight``, ``repeat`` and ``choose`` (none: every sample once per
    epoch, i.e. ``repeat=1``). Per epoch the source contributes an exact integer quota.

    Args:
        path: a path, glob, URL or list of them, or a :class:`~shardwise.DatasetIndex`.
        weight: relative share of the epoch (give it to every source or to none); the
            epoch is ``epoch_size`` samples, or all samples of all sources.
        repeat: samples per epoch as a multiple of the source's size (``2.0``: every
            sample twice; ``0.5``: a different half each epoch).
        choose: exactly this many samples per epoch (a source smaller than that wraps around).
        columns: this source's columns: a list of names, or a mapping ``{dataset name:
            this source's name}`` that renames them to align with the other sources.
        name: the name shown in ``ds.stats()`` and ``shardwise plan`` (default: the path).
        **open_options: passed to :func:`shardwise.open_dataset` (``format``,
            ``storage_options``, format options).
    """

    def __init__(
        self,
        path: Any,
        *,
        weight: float | None = None,
        repeat: float | None = None,
        choose: int | None = None,
        columns: Sequence[str] | Mapping[str, str] | None = None,
        name: str | None = None,
        **open_options: Any,
    ) -> None:
        if choose is not None and (
            isinstance(choose, bool) or not isinstance(choose, (int, np.integer))
        ):
            raise ConfigError(f"choose= must be a whole number of samples, got {choose!r}")
        self.rule = Rule(weight, repeat, None if choose is None else int(choose))
        self.path = path
        if isinstance(columns, str) or (
            columns is not None and not isinstance(columns, (Mapping, Sequence))
        ):
            raise ConfigError(
                f"Source columns= must be a list of names or a mapping, got {columns!r}"
            )
        self.columns: dict[str, str] | None = (
            None
            if columns is None
            else dict(columns)
            if isinstance(columns, Mapping)
            else {c: c for c in columns}
        )
        self.name = name if name is not None else _describe(path)
        if "on_error" in open_options:
            raise ConfigError("give on_error= to StreamingDataset: it applies to every source")
        self.open_options = open_options

    def __repr__(self) -> str:
        rule = {k: v for k, v in vars(self.rule).items() if v is not None}
        return f"Source({self.name!r}, {', '.join(f'{k}={v!r}' for k, v in rule.items()) or 'repeat=1'})"


def _describe(path: Any) -> str:
    if isinstance(path, DatasetIndex):
        return path.location or (path.files[0].path if path.files else "index")
    if isinstance(path, (str, os.PathLike)):
        return os.fspath(path)
    return ", ".join(os.fspath(p) for p in path)


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


def open_source(
    source: Any,
    on_error: OnError,
    open_options: dict[str, Any],
    columns: Sequence[str] | None,
    known: Sequence[str] = (),
) -> DatasetIndex | MixedIndex:
    """The dataset's index: a :class:`DatasetIndex`, or a :class:`MixedIndex` for a
    :class:`Source` or a list of them. Options neither ``open_dataset`` nor the format
    takes are refused naming ``StreamingDataset`` and the nearest of ``known`` arguments."""
    if isinstance(source, Source):
        source = [source]
    if isinstance(source, (list, tuple)) and any(isinstance(s, Source) for s in source):
        if not all(isinstance(s, Source) for s in source):
            raise ConfigError(
                "give StreamingDataset either paths or a list of shardwise.Source, not both"
            )
        if open_options:
            raise ConfigError(
                f"with sources, give open options to each Source, not StreamingDataset "
                f"(got {sorted(open_options)})"
            )
        return _open_mixed(list(source), on_error, columns)
    return _open_one(source, on_error, open_options, "StreamingDataset", known)


def _open_one(
    path: Any, on_error: OnError, options: dict[str, Any], who: str, known: Sequence[str] = ()
) -> DatasetIndex:
    if isinstance(path, DatasetIndex):
        return path
    own = (
        (*known, *OPEN_OPTIONS)
        if known
        else (*inspect.signature(Source.__init__).parameters, *OPEN_OPTIONS)
    )
    check_format_options(
        options.get("format"), {k: v for k, v in options.items() if k not in OPEN_OPTIONS}, who, own
    )
    return open_dataset(path, on_error=on_error, **options)


def _open_mixed(
    sources: list[Source], on_error: OnError, columns: Sequence[str] | None
) -> MixedIndex:
    names = [s.name for s in sources]
    if len(set(names)) < len(names):
        raise ConfigError(f"sources need distinct names (name=...), got {names}")
    indexes = [_open_one(s.path, on_error, s.open_options, "Source") for s in sources]
    renames = [_own_columns(s, ix) for s, ix in zip(sources, indexes)]
    wanted = list(columns) if columns is not None else _common(sources, renames)
    for s, ren in zip(sources, renames):
        missing = [c for c in wanted if c not in ren]
        if missing:
            raise ConfigError(
                f"source {s.name!r} has no column {missing} (it has {sorted(ren)}); map its "
                f"names with Source(..., columns={{'<name>': '<its name>'}})"
            )
    aligned = [{c: ren[c] for c in wanted} for ren in renames]
    schema = _unify(sources, indexes, aligned, wanted)
    offsets = tuple(np.cumsum([0, *(ix.num_units for ix in indexes)]).tolist())
    return MixedIndex(sources, indexes, aligned, schema, offsets)


def _own_columns(source: Source, index: DatasetIndex) -> dict[str, str]:
    names = index.schema.names
    if source.columns is None:
        return {c: c for c in names}
    missing = [c for c in source.columns.values() if c not in names]
    if missing:
        raise ConfigError(f"source {source.name!r} has no column {missing}; it has {names}")
    return dict(source.columns)


def _common(sources: list[Source], renames: list[dict[str, str]]) -> list[str]:
    first = list(renames[0])
    for s, ren in zip(sources[1:], renames[1:]):
        if set(ren) != set(first):
            raise ConfigError(
                f"sources {sources[0].name!r} and {s.name!r} have different columns: only in the first "
                f"{sorted(set(first) - set(ren))}, only in the second {sorted(set(ren) - set(first))}; "
                "pick common ones with columns=[...] or map a source's names with "
                "Source(..., columns={'<name>': '<its name>'})"
            )
    return first


def _unify(
    sources: list[Source],
    indexes: list[DatasetIndex],
    aligned: list[dict[str, str]],
    wanted: list[str],
) -> pa.Schema:
    fields = []
    for c in wanted:
        types = [ix.schema.field(ren[c]).type for ix, ren in zip(indexes, aligned)]
        try:
            schema = pa.unify_schemas(
                [pa.schema([pa.field(c, t)]) for t in types], promote_options="permissive"
            )
        except (pa.ArrowInvalid, pa.ArrowTypeError, NotImplementedError) as exc:
            listed = ", ".join(f"{s.name!r}: {t}" for s, t in zip(sources, types))
            raise ConfigError(
                f"column {c!r} has types that do not unify across sources ({listed}); "
                "select other columns with columns=[...]"
            ) from exc
        fields.append(schema.field(c))
    return pa.schema(fields)


class MixedReader:
    """Reads a unit of a :class:`MixedIndex` from its source, with the dataset's columns
    (picklable; same interface as :class:`~shardwise.loader.reader.UnitReader`)."""

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


def open_reader(
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


def check_not_empty(
    index: DatasetIndex | MixedIndex,
    counts: np.ndarray,
    filter: pc.Expression | None,
    quarantine: Quarantine,
) -> None:
    """Refuse a dataset with nothing to stream, naming its first files."""
    if int(counts.sum()):
        return
    after = " after filter=" if filter is not None else ""
    after += " after quarantining bad records" if quarantine.count else ""
    where = ", ".join(f.path for f in index.files[:3]) + (" ..." if len(index.files) > 3 else "")
    raise PlanError(f"nothing to stream: {where or 'the dataset'} has no samples{after}")
