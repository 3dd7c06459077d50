"""Read units of a remote dataset through the node-local cache.

Which bytes a unit needs: a Parquet row group of a file with several is the byte range
of its column chunks plus the file's footer (the last 64 KiB, an entry of its own shared
by the file's row groups; a row group's own entry stops where it starts, so no byte is
fetched twice); the only row group of a file is read with its footer in one request, as
one entry (the whole file); a JSONL unit is its byte range; a compressed JSONL file and
a tar shard are read whole. While a unit is read, those entries are leased and the
format's reader is served from them (see :mod:`shardwise.storage.overlay`), so formats
need no change and errors still name the URL.
"""

from __future__ import annotations

import contextlib
import os
from collections import Counter
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow.parquet as pq

from shardwise.formats import Unit
from shardwise.index import DatasetIndex, cache_root
from shardwise.storage import named, resolve, with_retries
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.entry import Extent
from shardwise.storage.overlay import Bytes, SparseFile, serving

__all__ = ["UnitCache", "default_budget", "fetch_range", "node_cache"]

FOOTER_READ = 64 * 2**10  # what Arrow reads first from the end of a Parquet file
FETCH_CHUNK = 16 * 2**20


def default_budget(root: str) -> int:
    """Half the free space of the filesystem that holds ``root`` (at least 1 GiB)."""
    os.makedirs(root, exist_ok=True)
    st = os.statvfs(root)
    return max(2**30, st.f_bavail * st.f_frsize // 2)


def fetch_range(url: str, start: int, end: int, storage_options: dict[str, Any]) -> Iterator[bytes]:
    """Yield ``[start, end)`` of ``url`` in ranged reads of at most 16 MiB (each retried)."""
    fs, path = resolve(url, **storage_options)
    with named(url):
        for lo in range(start, end, FETCH_CHUNK):
            yield with_retries(partial(fs.cat_file, path, start=lo, end=min(end, lo + FETCH_CHUNK)))


def _endpoint(storage_options: dict[str, Any]) -> str:
    client = storage_options.get("client_kwargs") or {}
    return str(
        client.get("endpoint_url")
        or storage_options.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL_S3")
        or os.environ.get("AWS_ENDPOINT_URL")
        or ""
    )


class UnitCache:
    """The units of one dataset, read through a :class:`NodeCache`.

    Args:
        index: the dataset (its files' sizes and ETags/mtimes make the entries' versions).
        cache: the node cache.
    """

    def __init__(self, index: DatasetIndex, cache: NodeCache) -> None:
        self.index = index
        self.cache = cache
        self.options = dict(index.storage_options or {})
        self._files = {f.path: f for f in index.files}
        self._endpoint = _endpoint(self.options)
        self._row_groups: dict[str, list[tuple[int, int]]] = {}
        self._units_in = Counter(u.path for u in index.units)

    @staticmethod
    def cached(url: str) -> bool:
        """True for remote files (local files are read where they are)."""
        return "://" in url and not url.startswith("file://")

    def _extent(self, url: str, start: int, end: int) -> Extent:
        f = self._files[url]
        source = f"{self._endpoint}|{url}" if self._endpoint else url
        return Extent(source, start, end, f"{f.fingerprint}:{f.size}")

    def _fetch(self, url: str, start: int, end: int) -> Iterator[bytes]:
        return fetch_range(url, start, end, self.options)

    @contextlib.contextmanager
    def serve(self, unit: Unit) -> Iterator[None]:
        """For a ``with`` block reading ``unit``: its entries leased, its reads served."""
        if not self.cached(unit.path) or unit.path not in self._files:
            yield
            return
        size = self._files[unit.path].size
        with contextlib.ExitStack() as stack:
            pieces = [
                piece
                for extent in self._extents(unit, stack)
                if (piece := self._lease(stack, unit.path, extent)) is not None
            ]
            reader = partial(self._read_remote, unit.path)
            with serving(unit.path, lambda: SparseFile(size, pieces, reader, unit.path)):  # type: ignore[arg-type,return-value]
                yield

    def _lease(
        self, stack: contextlib.ExitStack, url: str, extent: Extent
    ) -> tuple[int, Bytes] | None:
        data = stack.enter_context(
            self.cache.lease(extent, partial(self._fetch, url, extent.start, extent.end))
        )
        return None if data is None else (extent.start, data)

    def _read_remote(self, url: str, start: int, end: int) -> bytes:
        data = b"".join(fetch_range(url, start, end, self.options))
        self.cache.note_uncached(url, len(data))
        return data

    def _whole(self, unit: Unit) -> Extent | None:
        """The unit's one entry, unless it is a row group of a file with several."""
        if self.index.format == "parquet" and self._units_in[unit.path] > 1:
            return None
        start, end = (
            (unit.start, unit.end) if unit.end > unit.start else (0, self._files[unit.path].size)
        )
        return self._extent(unit.path, start, end)

    def is_cached(self, unit: Unit) -> bool:
        """True if every entry ``unit`` needs is on disk now (nothing is read or leased);
        False also when that is not known without reading its file's footer."""
        if not self.cached(unit.path) or unit.path not in self._files:
            return True
        whole = self._whole(unit)
        if whole is not None:
            return self.cache.has(whole)
        ranges = self._row_groups.get(unit.path)
        if ranges is None:
            return False
        size = self._files[unit.path].size
        tail = self._extent(unit.path, max(0, size - FOOTER_READ), size)
        start, end = ranges[unit.index][0], min(ranges[unit.index][1], tail.start)
        return self.cache.has(tail) and (
            end <= start or self.cache.has(self._extent(unit.path, start, end))
        )

    def _extents(self, unit: Unit, stack: contextlib.ExitStack) -> list[Extent]:
        size = self._files[unit.path].size
        whole = self._whole(unit)
        if whole is not None:
            return [whole]
        footer = self._footer(unit.path, size, stack)
        if unit.path not in self._row_groups:
            self._row_groups[unit.path] = _row_group_ranges(
                SparseFile(
                    size,
                    [(e.start, d) for e, d in footer],
                    partial(self._read_remote, unit.path),
                    unit.path,
                )
            )
        start, end = self._row_groups[unit.path][unit.index]
        end = min(
            end, *(e.start for e, _ in footer)
        )  # bytes the footer's entries hold come from there
        tail = [self._extent(unit.path, start, end)] if end > start else []
        return [e for e, _ in footer] + tail

    def _footer(
        self, url: str, size: int, stack: contextlib.ExitStack
    ) -> list[tuple[Extent, Bytes]]:
        """The footer's entries (the last 64 KiB, and the rest of a larger footer)."""
        tail = self._extent(url, max(0, size - FOOTER_READ), size)
        tail_data = self._leased(stack, url, tail)
        out = [(tail, tail_data)]
        meta_len = int.from_bytes(tail_data[-8:-4], "little") + 8 if len(tail_data) >= 8 else 0
        if meta_len > tail.length and size - meta_len >= 0:
            head = self._extent(url, size - meta_len, tail.start)
            out.append((head, self._leased(stack, url, head)))
        return out

    def _leased(self, stack: contextlib.ExitStack, url: str, extent: Extent) -> Bytes:
        data = stack.enter_context(
            self.cache.lease(extent, partial(self._fetch, url, extent.start, extent.end))
        )
        return data if data is not None else self._read_remote(url, extent.start, extent.end)


def _row_group_ranges(f: SparseFile) -> list[tuple[int, int]]:
    """``[start, end)`` of every row group's column chunks, from the footer."""
    md = pq.ParquetFile(f).metadata
    out = []
    for i in range(md.num_row_groups):
        rg = md.row_group(i)
        starts, ends = [], []
        for c in range(rg.num_columns):
            col = rg.column(c)
            first = col.data_page_offset
            if col.has_dictionary_page and col.dictionary_page_offset:
                first = min(first, col.dictionary_page_offset)
            starts.append(first)
            ends.append(first + col.total_compressed_size)
        out.append((min(starts), max(ends)) if starts else (0, 0))
    return out


def node_cache(cache_dir: str | None, cache_bytes: int | None) -> NodeCache | None:
    """The node-local unit cache asked for, if any (see ``cache_dir``/``cache_bytes`` of
    :class:`~shardwise.loader.StreamingDataset`)."""
    if cache_dir is None and cache_bytes is None:
        return None
    root = os.path.join(os.path.dirname(cache_root(cache_dir)), "units")
    if cache_bytes is None:
        cache_bytes = default_budget(root)
    return NodeCache(root, cache_bytes)
