"""Parquet files indexed as concurrent I/O: one ranged read of each file's last 64 KiB
(a second only when its footer is larger), up to :data:`CONCURRENCY` reads in flight,
each footer parsed as it arrives. Sizes come from the listing, so no file is asked for
its size; on an object store a file costs one request.

Async filesystems (s3fs, gcsfs, HTTP) run the reads as coroutines on fsspec's event loop;
others (local disk, memory) on a pool of threads. S3 reads take a light road where it
applies (:mod:`shardwise.storage.s3gets`): an S3 client's own request path costs enough
CPU to bind the process to its core long before the store is busy.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

import fsspec
import pyarrow as pa

from shardwise.errors import StorageError
from shardwise.formats import Unit
from shardwise.formats.parquet._footer import footer_start, tail_start, units_from_tail
from shardwise.storage import FileInfo, is_transient, named, resolve, with_retries
from shardwise.storage.s3gets import LightGets

__all__ = ["CONCURRENCY", "index_parquet", "progress_bar"]

#: reads in flight at once (and the S3 client's connection pool, when it has fewer)
CONCURRENCY = 64
#: local files up to which footers are read in the calling thread
SERIAL_FILES = 16
_ATTEMPTS, _BASE_DELAY = 5, 0.2

Indexed = tuple[list[Unit], pa.Schema]


def index_parquet(
    infos: Sequence[FileInfo], storage_options: dict[str, Any], progress: bool
) -> list[Indexed]:
    """Units and schema of each Parquet file, in the order of ``infos``.

    Raises:
        FormatError: a file is not a readable Parquet file (naming it).
        StorageError: a file cannot be read (not found, access denied).
    """
    out: list[Indexed | None] = [None] * len(infos)
    bar = progress_bar(len(infos), "index files", progress and len(infos) > 1)
    try:
        for proto, positions in _by_protocol(infos).items():
            group = [infos[i] for i in positions]
            fs, _ = resolve(group[0].path, **_pooled(proto, storage_options))
            if getattr(fs, "async_impl", False) and not getattr(fs, "asynchronous", False):
                found = fsspec.asyn.sync(fs.loop, _gather, fs, group, bar.update)
            else:
                found = _threaded(fs, group, bar.update)
            for i, got in zip(positions, found):
                out[i] = got
    finally:
        bar.close()
    return [x for x in out if x is not None]


def progress_bar(total: int, desc: str, enabled: bool) -> Any:
    """A tqdm bar counting files, with files per second (plain text, one line every 10 s,
    when stderr is not a terminal: readable in CI logs); a silent stand-in when disabled
    or ``SHARDWISE_PROGRESS=0``."""
    if not enabled or os.environ.get("SHARDWISE_PROGRESS") == "0":
        return _NoBar()
    from shardwise.parallel._progress import tqdm_class

    class _Bar(tqdm_class()):  # type: ignore[misc]
        monitor_interval = 0  # no monitor thread: starting one cost up to 6 ms of an open

    tty = sys.stderr.isatty()
    interval = os.environ.get("TQDM_MININTERVAL")
    return _Bar(
        total=total,
        desc=desc,
        unit=" files",
        mininterval=float(interval) if interval else (0.1 if tty else 10.0),
        dynamic_ncols=tty,
        ascii=not tty,
        file=sys.stderr,
    )


class _NoBar:
    """The bar when progress is off (a disabled tqdm bar still starts tqdm's monitor)."""

    def update(self, n: int = 1) -> None:
        """Nothing to show."""

    def close(self) -> None:
        """Nothing to close."""


def _by_protocol(infos: Sequence[FileInfo]) -> dict[str, list[int]]:
    groups: dict[str, list[int]] = {}
    for i, fi in enumerate(infos):
        proto = fi.path.split("://", 1)[0] if "://" in fi.path else "file"
        groups.setdefault(proto, []).append(i)
    return groups


def _pooled(proto: str, storage_options: dict[str, Any]) -> dict[str, Any]:
    """S3 clients keep 10 connections unless told otherwise: room for every read."""
    if proto not in ("s3", "s3a"):
        return storage_options
    config = dict(storage_options.get("config_kwargs") or {})
    config["max_pool_connections"] = max(config.get("max_pool_connections", 0), CONCURRENCY)
    return {**storage_options, "config_kwargs": config}


async def _gather(
    fs: fsspec.AbstractFileSystem, infos: Sequence[FileInfo], done: Callable[[], Any]
) -> list[Indexed]:
    """Up to CONCURRENCY workers take files in turn; the first error stops them all."""
    out: list[Indexed | None] = [None] * len(infos)
    todo = iter(enumerate(infos))
    light = await LightGets.open(fs, CONCURRENCY)

    async def worker() -> None:
        for i, fi in todo:
            out[i] = await _index_async(fs, light, fi)
            done()

    tasks = [asyncio.ensure_future(worker()) for _ in range(min(CONCURRENCY, len(infos)))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        if light is not None:
            await light.close()
    return [x for x in out if x is not None]


async def _index_async(
    fs: fsspec.AbstractFileSystem, light: LightGets | None, fi: FileInfo
) -> Indexed:
    path = fs._strip_protocol(fi.path)
    tail = await _read_async(fs, light, fi, path, tail_start(fi.size), fi.size)
    start = footer_start(fi.size, tail)
    if start is not None:
        tail = await _read_async(fs, light, fi, path, start, fi.size - len(tail)) + tail
    return units_from_tail(fi.path, fi.size, tail)


async def _read_async(
    fs: fsspec.AbstractFileSystem,
    light: LightGets | None,
    fi: FileInfo,
    path: str,
    start: int,
    end: int,
) -> bytes:
    """Bytes ``[start, end)`` of the file: by the light road when it gives them, else
    (and for every error a user sees) by the filesystem, with retries.

    Raises:
        StorageError: the read failed (naming the file), or the file is shorter than
            the listing said (it changed since).
    """
    if end <= start:
        return b""
    got = await light.get(fi.path, path, start, end, fi.fingerprint) if light else None
    if got is None:
        got = await _retrying(lambda: fs._cat_file(path, start=start, end=end), fi.path)
    return _whole(fi, start, end, got)


def _whole(fi: FileInfo, start: int, end: int, got: bytes) -> bytes:
    """``got``, the file's bytes ``[start, end)``, unless it is short: the file shrank
    since it was listed (its footer would be read at the listing's size)."""
    if len(got) != end - start:
        raise StorageError(
            f"{fi.path} changed while it was indexed (bytes {start:,}-{end:,} of the "
            f"{fi.size:,} listed gave {len(got):,}); open the dataset again",
            fi.path,
        )
    return got


async def _retrying(call: Callable[[], Awaitable[bytes]], url: str) -> bytes:
    """``call()`` with :func:`with_retries`' policy, without blocking the event loop; a
    failure that is not already a StorageError is one naming ``url``."""
    for attempt in range(_ATTEMPTS):
        try:
            with named(url):
                return await call()
        except StorageError:
            raise
        except Exception as exc:
            if attempt < _ATTEMPTS - 1 and is_transient(exc):
                await asyncio.sleep(min(10.0, _BASE_DELAY * 2**attempt))
                continue
            raise StorageError(
                f"cannot read {url} (footer): {type(exc).__name__}: {exc}", url
            ) from exc
    return b""  # not reached: the last attempt returns or raises


def _threaded(
    fs: fsspec.AbstractFileSystem, infos: Sequence[FileInfo], done: Callable[[], Any]
) -> list[Indexed]:
    def one(fi: FileInfo) -> Indexed:
        got = _index_sync(fs, fi)
        done()
        return got

    if len(infos) <= SERIAL_FILES:
        return [one(fi) for fi in infos]
    with ThreadPoolExecutor(min(CONCURRENCY // 2, len(infos)), "shardwise-index") as pool:
        return list(pool.map(one, infos))


def _index_sync(fs: fsspec.AbstractFileSystem, fi: FileInfo) -> Indexed:
    path = fs._strip_protocol(fi.path)

    def read(start: int, end: int) -> bytes:
        if end <= start:
            return b""
        with named(fi.path):
            return _whole(
                fi,
                start,
                end,
                bytes(with_retries(partial(fs.cat_file, path, start=start, end=end))),
            )

    tail = read(tail_start(fi.size), fi.size)
    start = footer_start(fi.size, tail)
    if start is not None:
        tail = read(start, fi.size - len(tail)) + tail
    return units_from_tail(fi.path, fi.size, tail)
