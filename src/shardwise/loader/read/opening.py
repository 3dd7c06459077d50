"""Opening what ``StreamingDataset`` is given: one dataset, or several sources
(:class:`Source`) whose columns are aligned into one
:class:`~shardwise.loader.read.mixed.MixedIndex`.

Columns align by name. Sources whose columns differ are refused unless the dataset's
``columns=`` picks columns every source has, or a source maps its own names onto the
dataset's (``Source(path, columns={"text": "content"})``: the dataset's ``text`` is this
source's ``content``). Types of one column are unified (``int32`` and ``int64`` become
``int64``); types that cannot be unified are refused, naming sources and column.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError, PlanError
from shardwise.formats import OnError, Quarantine, check_format_options
from shardwise.index import OPEN_OPTIONS, DatasetIndex, index_dataset
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.source import Source

__all__ = ["check_not_empty", "open_index"]


def open_index(
    source: Any,
    on_error: OnError,
    open_options: dict[str, Any],
    columns: Sequence[str] | None,
    known: Sequence[str] = (),
    cache_dir: str | None = None,
    optional: Sequence[str] = (),
) -> DatasetIndex | MixedIndex:
    """The dataset's index: a :class:`DatasetIndex`, or a :class:`MixedIndex` for a
    :class:`Source` or a list of them. Options neither ``index_dataset`` nor the format
    takes are refused naming ``StreamingDataset`` and the nearest of ``known`` arguments.
    A dataset's index is kept in ``cache_dir`` if given. Sources are aligned on
    ``columns`` (None: all of theirs, the same in each) and those of ``optional`` every
    source has."""
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
        return _open_mixed(list(source), on_error, columns, optional)
    if cache_dir is not None:  # the index is kept there too
        open_options = dict(open_options, cache_dir=cache_dir)
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
    return index_dataset(path, on_error=on_error, **options)


def _open_mixed(
    sources: list[Source],
    on_error: OnError,
    columns: Sequence[str] | None,
    optional: Sequence[str] = (),
) -> MixedIndex:
    names = [s.name for s in sources]
    if len(set(names)) < len(names):
        raise ConfigError(f"sources need distinct names (name=...), got {names}")
    indexes = [_open_one(s.path, on_error, s.open_options, "Source") for s in sources]
    renames = [_own_columns(s, ix) for s, ix in zip(sources, indexes)]
    wanted = list(columns) if columns is not None else _common(sources, renames)
    wanted += [c for c in optional if c not in wanted and all(c in r for r in renames)]
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
                f"sources {sources[0].name!r} and {s.name!r} have different columns: only in "
                f"the first {sorted(set(first) - set(ren))}, only in the second "
                f"{sorted(set(ren) - set(first))}; "
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


def check_not_empty(
    index: DatasetIndex | MixedIndex,
    counts: Any,
    filter: pc.Expression | None = None,
    quarantine: Quarantine | None = None,
    what: str = "samples",
) -> None:
    """Refuse a dataset with nothing to stream, naming its first files (``what`` it lacks:
    samples, or a token stream's sequences)."""
    if int(np.asarray(counts).sum()):
        return
    after = " after filter=" if filter is not None else ""
    after += " after quarantining bad records" if quarantine and quarantine.count else ""
    where = ", ".join(f.path for f in index.files[:3]) + (" ..." if len(index.files) > 3 else "")
    raise PlanError(f"nothing to stream: {where or 'the dataset'} has no {what}{after}")
