"""Read units of a remote dataset through the node-local cache.

Which bytes a unit needs: a Parquet row group of a file with several is the file's
footer (the last 64 KiB, an entry of its own shared by the file's row groups) and the
column chunks the dataset reads, each chunk an entry of its own: a read of some columns
fetches only theirs, and a later read of other columns (another epoch, another job on
the node) reuses the chunks they share and fetches the rest. A read of every column on
a cold row group takes its whole byte range in one request, as one entry, which later
reads of any columns use too. Entries stop where the footer's start, so no byte is
fetched twice. The only row group of a file is read with its footer in one request, as
one entry (the whole file), unless some columns are chosen and that entry is not on
disk: then as a row group of a file with several. A JSONL unit is its byte range; a
compressed JSONL file and a tar shard are read whole. While a unit is read, those entries
are leased and the format's reader is served from them (see :mod:`shardwise.storage.overlay`),
so formats need no change and errors still name the URL.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, cast

from shardwise.formats import Unit
from shardwise.index import DatasetIndex, cache_root
from shardwise.loader.read.chunks import Chunk, chosen, row_group_chunks, span, until
from shardwise.storage import named, resolve, with_retries
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.entry import Extent
from shardwise.storage.cache.hits import FOOTER  # the stats' name of files' footers
from shardwise.storage.overlay import Bytes, SparseFile, serving
from shardwise.storage.ranged import IntoReader, into_reader

__all__ = ["ETAG", "UnitCache", "default_budget", "fetch_range", "node_cache"]

FOOTER_READ = 64 * 2**10  # what Arrow reads first from the end of a Parquet file
FETCH_CHUNK = 16 * 2**20
ETAG = re.compile(r"^[0-9a-fA-F]{32}(-[0-9]+)?$")  # an S3 ETag (else: an mtime, ...)


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
        columns: the columns read (None: all). A Parquet row group then takes only those
            columns' chunks, each an entry of its own, shared by every read that needs it.
    """

    def __init__(
        self, index: DatasetIndex, cache: NodeCache, columns: Sequence[str] | None = None
    ) -> None:
        self.index = index
        self.cache = cache
        self.columns = list(columns) if columns is not None else None
        self.options = dict(index.storage_options or {})
        self._files = {f.path: f for f in index.files}
        self._endpoint = _endpoint(self.options)
        self._layout: dict[str, list[list[Chunk]]] = {}
        self._units_in = Counter(u.path for u in index.units)
        self._readers: dict[str, IntoReader] = {}

    @staticmethod
    def cached(url: str) -> bool:
        """True for remote files (local files are read where they are)."""
        return "://" in url and not url.startswith("file://")

    def _extent(self, url: str, start: int, end: int, column: str = "") -> Extent:
        f = self._files[url]
        source = f"{self._endpoint}|{url}" if self._endpoint else url
        return Extent(source, start, end, f"{f.fingerprint}:{f.size}", column)

    def _fetch(self, url: str, start: int, end: int) -> Iterator[bytes]:
        """``[start, end)`` of ``url`` in ranges of at most 16 MiB, each checked against
        the indexed ETag (``If-Match``) as downloads ahead are: a file changed since it was
        indexed is a :class:`~shardwise.errors.StorageError`, never other bytes."""
        read = self._range(url)
        for lo in range(start, end, FETCH_CHUNK):
            buf = bytearray(min(end, lo + FETCH_CHUNK) - lo)
            read(lo, lo + len(buf), memoryview(buf))
            yield cast(bytes, buf)  # bytes-like: written, checksummed and joined as it is

    def _range(self, url: str) -> IntoReader:
        """Ranged reads of ``url`` into a buffer, checked against the indexed ETag."""
        if url not in self._readers:
            fp = self._files[url].fingerprint
            etag = fp if ETAG.match(fp) else ""
            self._readers[url] = into_reader(url, self.options, etag)
        return self._readers[url]

    def _lease(self, url: str, extent: Extent) -> Any:
        """``extent``'s lease: the whole entry, downloaded here if no process of the node
        has it or is downloading it (a download ahead of it is waited for). Reads do not
        take the read-while-it-downloads path: an epoch after a cold epoch read that way
        ran at 0.55-0.6x (750 against 1,240-1,360 MB/s on the 2 GB tars), for the same
        cold rate. Downloads ahead (:meth:`fetch_ahead`) run by ranges."""
        return self.cache.lease(extent, partial(self._fetch, url, extent.start, extent.end))

    def ranged(self, unit: Unit) -> tuple[Extent, Callable[[], Iterator[bytes]], IntoReader] | None:
        """A remote unit read as one entry (a tar shard, a JSONL range, a one-row-group
        file): the entry, its fetch and its ranged reader (``NodeCache.lease``'s
        arguments); None for any other unit."""
        if not self.cached(unit.path) or unit.path not in self._files or self._projected():
            return None
        whole = self._whole(unit)
        if whole is None:
            return None
        return (
            whole,
            partial(self._fetch, unit.path, whole.start, whole.end),
            self._range(unit.path),
        )

    def fetch_ahead(self, unit: Unit) -> None:
        """Start downloading ``unit`` (if read as one entry, see :meth:`ranged`) on the
        cache's download threads; returns at once. Its later read reads from that download."""
        found = self.ranged(unit)
        if found is not None:
            self.cache.fetch_ahead(found[0], found[2])

    @contextlib.contextmanager
    def serve(self, unit: Unit, complete: bool = False) -> Iterator[None]:
        """For a ``with`` block reading ``unit``: its entries leased, its reads served
        (with ``complete``, once every byte of them is in the cache)."""
        if not self.cached(unit.path) or unit.path not in self._files:
            yield
            return
        size = self._files[unit.path].size
        with contextlib.ExitStack() as stack:
            pieces = self._pieces(unit, stack)
            for _, data in pieces if complete else ():
                wait = getattr(data, "wait_complete", None)
                if wait is not None:
                    wait()
            reader = partial(self._read_remote, unit.path)
            with serving(unit.path, lambda: SparseFile(size, pieces, reader, unit.path)):  # type: ignore[arg-type,return-value]
                yield

    def _pieces(self, unit: Unit, stack: contextlib.ExitStack) -> list[tuple[int, Bytes]]:
        """The unit's bytes as leased entries: a whole unit; or a row group's footer and,
        if on disk, its whole range, else the chosen columns' chunks (a cold read of every
        column: the row group in one range)."""
        whole = self._whole(unit)
        if whole is not None and not self._projected():
            return self._leased_pieces(stack, unit.path, [whole])
        found = stack.enter_context(self.cache.lease_if_cached(whole)) if whole else None
        if whole is not None and found is not None:
            return [(whole.start, found)]
        footer = self._footer(unit.path, self._files[unit.path].size, stack)
        pieces: list[tuple[int, Bytes]] = [(e.start, d) for e, d in footer]
        group, chunks = self._group(unit, footer)
        if group is None:
            return pieces
        held = self.cache.has(group)  # a whole row group's entry (a stat, then leased)
        found = stack.enter_context(self.cache.lease_if_cached(group)) if held else None
        if found is not None:
            return [*pieces, (group.start, found)]
        every = len(chunks) == len(self._layout[unit.path][unit.index])  # a read of all
        if every and not any(self.cache.has(c) for c in chunks):
            chunks = [group]
        return pieces + self._leased_pieces(stack, unit.path, chunks)

    def _projected(self) -> bool:
        return self.index.format == "parquet" and self.columns is not None

    def _leased_pieces(
        self, stack: contextlib.ExitStack, url: str, extents: list[Extent]
    ) -> list[tuple[int, Bytes]]:
        out: list[tuple[int, Bytes]] = []
        for extent in extents:
            data = stack.enter_context(self._lease(url, extent))
            if data is not None:
                out.append((extent.start, data))
        return out

    def _read_remote(self, url: str, start: int, end: int) -> bytes:
        data = b"".join(self._fetch(url, start, end))
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

    def _group(
        self, unit: Unit, footer: list[tuple[Extent, Bytes]]
    ) -> tuple[Extent | None, list[Extent]]:
        """The row group's whole range and its chosen chunks, as extents that stop where
        the footer's entries start (bytes those hold come from there)."""
        if unit.path not in self._layout:
            size = self._files[unit.path].size
            f = SparseFile(
                size, [(e.start, d) for e, d in footer], partial(self._read_remote, unit.path)
            )
            self._layout[unit.path] = row_group_chunks(f)  # type: ignore[arg-type]
        return self._cut(unit, min(e.start for e, _ in footer))

    def _cut(self, unit: Unit, stop: int) -> tuple[Extent | None, list[Extent]]:
        chunks = self._layout[unit.path][unit.index]
        start, end = span(chunks)
        group = (
            self._extent(unit.path, start, until(start, end, stop))
            if min(end, stop) > start
            else None
        )
        parts = [
            self._extent(unit.path, c.start, until(c.start, c.end, stop), c.column)
            for c in chosen(chunks, self.columns)
            if min(c.end, stop) > c.start
        ]
        return group, parts

    def is_cached(self, unit: Unit) -> bool:
        """True if every entry ``unit`` needs is on disk now (nothing is read or leased);
        False also when that is not known without reading its file's footer."""
        if not self.cached(unit.path) or unit.path not in self._files:
            return True
        whole = self._whole(unit)
        if whole is not None and (not self._projected() or self.cache.has(whole)):
            return self.cache.has(whole)
        if unit.path not in self._layout:
            return False
        size = self._files[unit.path].size
        tail = self._extent(unit.path, max(0, size - FOOTER_READ), size)
        group, chunks = self._cut(unit, tail.start)
        return self.cache.has(tail) and (
            group is None or self.cache.has(group) or all(self.cache.has(c) for c in chunks)
        )

    def _footer(
        self, url: str, size: int, stack: contextlib.ExitStack
    ) -> list[tuple[Extent, Bytes]]:
        """The footer's entries (the last 64 KiB, and the rest of a larger footer)."""
        tail = self._extent(url, max(0, size - FOOTER_READ), size, FOOTER)
        tail_data = self._leased(stack, url, tail)
        out = [(tail, tail_data)]
        meta_len = int.from_bytes(tail_data[-8:-4], "little") + 8 if len(tail_data) >= 8 else 0
        if meta_len > tail.length and size - meta_len >= 0:
            head = self._extent(url, size - meta_len, tail.start, FOOTER)
            out.append((head, self._leased(stack, url, head)))
        return out

    def _leased(self, stack: contextlib.ExitStack, url: str, extent: Extent) -> Bytes:
        data = stack.enter_context(self._lease(url, extent))
        return data if data is not None else self._read_remote(url, extent.start, extent.end)


def node_cache(cache_dir: str | None, cache_bytes: int | None) -> NodeCache | None:
    """The node-local unit cache asked for, if any (see ``cache_dir``/``cache_bytes`` of
    :class:`~shardwise.loader.StreamingDataset`)."""
    if cache_dir is None and cache_bytes is None:
        return None
    root = os.path.join(os.path.dirname(cache_root(cache_dir)), "units")
    if cache_bytes is None:
        cache_bytes = default_budget(root)
    return NodeCache(root, cache_bytes)
