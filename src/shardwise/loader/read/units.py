"""Read one unit of an index as an Arrow table, with projection and a filter.

The loader plan addresses samples as (unit, row); with a ``filter`` the rows are
numbered among the unit's *matching* rows, so the plan works on matched counts
(see :func:`count_rows`) and every rank still gets exactly the same number.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from shardwise.errors import ConfigError, StorageError
from shardwise.formats import OnError, Quarantine, get_format
from shardwise.index import DatasetIndex, cache_root
from shardwise.loader.read.cached import ETAG, UnitCache
from shardwise.storage import atomic_write, resolve, transient_in_chain, with_retries
from shardwise.storage.cache import NodeCache

__all__ = ["UnitReader", "count_rows"]

# tries of one unit read on transient errors: backoff 0.2 s doubling, capped at 10 s
UNIT_READ_ATTEMPTS = 9


class UnitReader:
    """Reads whole units of a dataset; picklable, so it can travel to workers.

    Args:
        index: the dataset index.
        columns: columns to keep (all when None).
        filter: a ``pyarrow.compute`` expression; rows not matching are left out.
        on_error: ``"raise"`` or ``"skip"`` for bad records (see the formats).
        cache: read remote units through this node-local cache.
    """

    def __init__(
        self,
        index: DatasetIndex,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        on_error: OnError = "raise",
        cache: NodeCache | None = None,
    ) -> None:
        if columns is not None:
            missing = [c for c in columns if c not in index.schema.names]
            if missing:
                raise ConfigError(
                    f"unknown columns {missing}; the dataset has {index.schema.names}"
                )
        self.index = index
        self.columns = list(columns) if columns is not None else None
        self.filter = filter
        self.on_error = on_error
        self.quarantine = Quarantine()
        self.cache = cache
        self._units: Any = None  # a UnitCache, made on first read (in the worker)
        self._fingerprints: dict[str, str] | None = None  # by path, for uncached reads

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_units": None, "_fingerprints": None}

    def _served(self, unit_id: int) -> contextlib.AbstractContextManager[None]:
        """Serves the unit's reads from the node cache (a no-op without one)."""
        if self.cache is None:
            return contextlib.nullcontext()
        if self._units is None:
            # the columns read: all of them under a filter (it may use any)
            read = None if self.filter is not None else self.columns
            self._units = UnitCache(self.index, self.cache, read)
        served: contextlib.AbstractContextManager[None] = self._units.serve(
            self.index.units[unit_id]
        )
        return served

    @property
    def schema(self) -> pa.Schema:
        """Schema of the tables :meth:`read` returns."""
        if self.columns is None:
            return self.index.schema
        return pa.schema([self.index.schema.field(c) for c in self.columns])

    def read(self, unit_id: int) -> pa.Table:
        """Return unit ``unit_id`` (filtered and projected) as one table.

        A read that a dropped connection or an unreachable server interrupts is made again
        from the start (backoff with jitter, about a minute in all), so an object store that
        restarts mid-epoch costs time, never a sample; what a failed try quarantined is
        not counted twice."""

        def attempt() -> tuple[pa.Table, Quarantine]:
            quarantine = Quarantine()
            return self._read(unit_id, quarantine), quarantine

        table, quarantine = with_retries(
            attempt, attempts=UNIT_READ_ATTEMPTS, retry_on=transient_in_chain
        )
        self.quarantine.merge(quarantine)
        return table

    def _read(self, unit_id: int, quarantine: Quarantine) -> pa.Table:
        unit = self.index.units[unit_id]
        fmt = get_format(self.index.format, storage_options=self.index.storage_options)
        read_cols = None if self.filter is not None else self.columns
        schema = (
            self.index.schema
            if read_cols is None
            else pa.schema([self.index.schema.field(c) for c in read_cols])
        )
        kwargs: dict[str, Any] = dict(
            columns=read_cols,
            on_error=self.on_error,
            quarantine=quarantine,
            schema=self.index.schema,
        )
        if self.cache is None:
            self._check_unchanged(unit.path)
        # the loader reads units on threads of its own: no decode threads per unit
        with self._served(unit_id):
            table = fmt.read_table(unit, use_threads=False, **kwargs)
        if table is None:
            table = schema.empty_table()
        if self.filter is not None:
            table = table.filter(self.filter)
        if self.columns is not None and table.column_names != list(self.columns):
            # exactly the projection, in its order (a tar's reader adds its __key__ column;
            # batches name their columns by position)
            table = table.select(self.columns)
        return table

    def _check_unchanged(self, url: str) -> None:
        """Refuse a remote file whose ETag is not the one it was indexed with (read without
        the node cache, whose ranged reads check it themselves): its rows would not be the
        ones the plan counted. One HEAD per unit read."""
        if not UnitCache.cached(url):
            return
        if self._fingerprints is None:
            self._fingerprints = {f.path: f.fingerprint for f in self.index.files}
        indexed = self._fingerprints.get(url, "")
        if not ETAG.match(indexed):
            return  # no ETag recorded (another store): nothing to compare
        fs, path = resolve(url, **self.index.storage_options)
        fs.invalidate_cache(path)
        info = with_retries(partial(fs.info, path))
        now = str(info.get("ETag") or info.get("etag") or "").strip('"')
        if now and now != indexed.strip('"'):
            raise StorageError(
                f"{url} changed since it was indexed (its ETag is {now}, not {indexed}): "
                "index the dataset again",
                url,
            )


def _count_chunk(
    args: tuple[DatasetIndex, pc.Expression | None, OnError, list[int]],
) -> tuple[list[int], Quarantine]:
    index, expr, on_error, unit_ids = args
    reader = UnitReader(index, filter=expr, on_error=on_error)
    return [reader.read(u).num_rows for u in unit_ids], reader.quarantine


def count_rows(
    index: DatasetIndex,
    filter: pc.Expression | None = None,
    on_error: OnError = "raise",
    *,
    cache_dir: str | None = None,
    backend: str | None = None,
) -> tuple[np.ndarray, Quarantine]:
    """Count the rows every unit yields after ``filter`` and, under ``on_error="skip"``,
    after quarantine (parallel, cached), so plans stay exact.

    The cache key is the expression's text, the error policy and every file's path, size
    and fingerprint, so a changed file, another filter or policy recounts.

    Returns:
        An int64 array with one count per unit of ``index``, and what was quarantined.
    """
    from shardwise.parallel import parallel_map

    key = _filter_key(index, f"{filter}|{on_error}")
    path = os.path.join(cache_root(cache_dir), "filters", key + ".json")
    cached = _load_counts(path, index.num_units)
    if cached is not None:
        return cached
    step = max(1, index.num_units // 64)
    chunks = [
        list(range(i, min(i + step, index.num_units))) for i in range(0, index.num_units, step)
    ]
    desc = "count filter matches" if filter is not None else "count readable rows"
    parts = parallel_map(
        _count_chunk, [(index, filter, on_error, c) for c in chunks], backend=backend, desc=desc
    )
    out = np.asarray([n for counts, _ in parts for n in counts], dtype=np.int64)
    quarantine = Quarantine()
    for _, q in parts:
        quarantine.merge(q)
    _save_counts(path, out, quarantine)
    return out, quarantine


def _load_counts(path: str, num_units: int) -> tuple[np.ndarray, Quarantine] | None:
    """Counts saved by :func:`_save_counts` for ``num_units`` units, if there are any."""
    try:
        with open(path) as f:
            cached = json.load(f)
        if len(cached["counts"]) == num_units:
            q = Quarantine(int(cached["quarantined"]), [tuple(e) for e in cached["examples"]])
            return np.asarray(cached["counts"], dtype=np.int64), q
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return None


def _save_counts(path: str, counts: np.ndarray, quarantine: Quarantine) -> None:
    """Keep ``counts`` and what was quarantined for the next count of the same key."""
    saved = {
        "counts": counts.tolist(),
        "quarantined": quarantine.count,
        "examples": [list(e) for e in quarantine.examples],
    }
    try:
        with atomic_write(path, "w") as f:
            json.dump(saved, f)
    except OSError:
        pass


def _filter_key(index: DatasetIndex, filter: Any) -> str:
    h = hashlib.sha1(str(filter).encode())
    for f in index.files:
        h.update(f"{f.path}\0{f.size}\0{f.fingerprint}\n".encode())
    return h.hexdigest()[:24]
