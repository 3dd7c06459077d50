"""Downloads by ranges (storage/cache/fill.py, streams.py, downloads.py): readers read the
bytes that are in while the rest downloads; a download asked for ahead is the one its
reader uses; a failed range fails its readers with the object named, leaves no entry and
no part file, and the next lease downloads again; the entry is published as any other."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from shardwise.errors import StorageError
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.entry import Extent, read_entry
from shardwise.storage.cache.fill import RANGE

SIZE = 2 * RANGE + 12_345  # three ranges, the last one short


def payload(n: int = SIZE) -> bytes:
    return bytes(i * 7 % 251 for i in range(256)) * (n // 256) + b"x" * (n % 256)


def extent(name: str = "obj") -> Extent:
    return Extent(f"s3://bucket/{name}", 0, SIZE, "etag-1")


class Ranges:
    """A range reader over ``payload()`` that counts ranges and can hold some back
    (until ``release``) or fail them."""

    def __init__(self, hold: set[int] = frozenset(), fail: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.data = payload()
        self.hold, self.fail = set(hold), set(fail)
        self.gate = threading.Event()
        self.calls: list[int] = []
        self.lock = threading.Lock()

    def __call__(self, start: int, end: int, view: memoryview) -> None:
        i = start // RANGE
        with self.lock:
            self.calls.append(i)
        if i in self.hold:
            assert self.gate.wait(60)
        if i in self.fail:
            raise StorageError("the server said no", "s3://bucket/obj")
        view[:] = self.data[start:end]


def test_a_reader_reads_the_first_range_while_the_last_is_held_back(tmp_path: Path) -> None:
    cache = NodeCache(str(tmp_path), 10**9)
    ranges = Ranges(hold={2})
    with cache.lease(extent(), lambda: iter(()), read_range=ranges) as data:
        assert data is not None
        assert data[10 : RANGE + 10] == payload()[10 : RANGE + 10]  # ranges 0 and 1 only
        assert not cache.has(extent())  # not published: the last range is still out
        ranges.gate.set()
        assert bytes(data[:]) == payload()
    assert sorted(ranges.calls) == [0, 1, 2]
    _wait_published(cache)
    assert read_entry(os.path.join(cache.root, "entries", extent().key), extent()) == payload()
    assert cache.stats.downloads == 1 and cache.stats.bytes_fetched == SIZE
    assert os.listdir(os.path.join(cache.root, "tmp")) == []
    with cache.lease(extent(), lambda: iter(()), read_range=Ranges()) as again:
        assert again == payload()  # a hit: nothing fetched
    assert cache.stats.downloads == 1 and cache.stats.hits == 1


def test_a_download_asked_for_ahead_is_the_one_its_reader_uses(tmp_path: Path) -> None:
    cache = NodeCache(str(tmp_path), 10**9)
    ranges = Ranges(hold={1})
    cache.fetch_ahead(extent(), ranges)
    cache.fetch_ahead(extent(), ranges)  # asked twice: one download
    with cache.lease(extent(), lambda: iter(()), read_range=Ranges()) as data:
        assert data is not None
        assert data[:100] == payload()[:100]
        ranges.gate.set()
        assert data == payload()
    assert sorted(ranges.calls) == [0, 1, 2]
    _wait_published(cache)
    assert cache.stats.downloads == 1


def test_a_failed_range_fails_its_readers_and_leaves_nothing(tmp_path: Path) -> None:
    cache = NodeCache(str(tmp_path), 10**9)
    with cache.lease(extent(), lambda: iter(()), read_range=Ranges(fail={1})) as data:
        assert data is not None
        with pytest.raises(StorageError, match="s3://bucket/obj"):
            data[RANGE : RANGE + 10]
    assert not cache.has(extent())
    assert os.listdir(os.path.join(cache.root, "tmp")) == []
    assert os.listdir(os.path.join(cache.root, "locks")) == []
    with cache.lease(extent(), lambda: iter(()), read_range=Ranges()) as data:
        assert data == payload()  # downloaded again, whole
    _wait_published(cache)
    assert cache.has(extent()) and cache.stats.downloads == 1


def test_an_entry_too_big_for_the_budget_is_read_without_caching(tmp_path: Path) -> None:
    cache = NodeCache(str(tmp_path), SIZE // 2)
    with cache.lease(extent(), lambda: iter(()), read_range=Ranges()) as data:
        assert data is None
    assert cache.stats.read_through == 1 and not cache.has(extent())


def _wait_published(cache: NodeCache) -> None:
    """The download threads publish after the last range; wait for the rename."""
    deadline = 600
    while cache._streams._fills and deadline:
        threading.Event().wait(0.01)
        deadline -= 1
    assert not cache._streams._fills
