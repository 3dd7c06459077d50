"""Hits of the node cache: entries memory-mapped and handed out as views, checked once per
file per process, stamped only when their stamp is old; and the views served through a SparseFile
to Arrow and the page reader without a copy."""

from __future__ import annotations

import io
import os
import zlib
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _cachework import SIZE, extent, payload, slow_fetch

from shardwise.storage.cache import NodeCache
from shardwise.storage.cache import hits as cache_hits
from shardwise.storage.cache import node as cache_node
from shardwise.storage.cache import sums as cache_sums
from shardwise.storage.cache import verified as cache_verified
from shardwise.storage.cache.entry import Extent
from shardwise.storage.cache.hits import FOOTER, Copied, Hits, MappedView
from shardwise.storage.cache.verified import identity
from shardwise.storage.overlay import SparseFile
from shardwise.storage.recording import RecordingFile


def _map_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """Entries of any size leased and mapped (not copied as small ones)."""
    monkeypatch.setattr(cache_hits, "MAP_MIN", 1)
    monkeypatch.setattr(cache_node, "MAP_MIN", 1)


def _cached(root: str, i: int) -> NodeCache:
    cache = NodeCache(root, 10**7)
    with cache.lease(extent(i), lambda: slow_fetch(i, delay=0)):
        pass
    return cache


class _Counting:
    """Counts calls of ``name`` on ``module`` (the original still runs)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
        self.calls = 0
        original = getattr(module, name)

        def counted(*args: object, **kwargs: object) -> object:
            self.calls += 1
            return original(*args, **kwargs)

        monkeypatch.setattr(module, name, counted)


def test_a_hit_is_mapped_and_its_views_are_the_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _map_all(monkeypatch)
    cache = _cached(str(tmp_path / "c"), 3)
    with cache.lease_if_cached(extent(3)) as data:
        assert isinstance(data, MappedView) and len(data) == SIZE
        view = data.view(10, 30)
        assert isinstance(view, memoryview) and view == payload(3)[10:30]
        assert data[5:9] == payload(3)[5:9] and bytes(data) == payload(3)
        into = memoryview(bytearray(7))
        data.readinto_at(into, 100)
        assert into == payload(3)[100:107]
    assert view == payload(3)[10:30]  # a view outlives the lease: the map goes with it
    assert not os.listdir(tmp_path / "c" / "leases")


def test_the_record_is_read_once_per_file_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cached(str(tmp_path / "c"), 4)
    checks = _Counting(monkeypatch, cache_hits, "check_entry")
    for _ in range(3):
        with cache.lease_if_cached(extent(4)) as data:
            assert data is not None and data[:5] == payload(4)[:5]
    assert checks.calls == 1 and cache.stats.hits == 3
    entry = tmp_path / "c" / "entries" / extent(4).key
    os.utime(entry, ns=(1, 1))  # another file now, as far as this process knows: checked again
    with cache.lease_if_cached(extent(4)) as data:
        assert data is not None and bytes(data) == payload(4)
    assert checks.calls == 2 and cache.stats.bad_entries == 0


def test_a_known_file_changed_in_place_is_found_bad(tmp_path: Path) -> None:
    cache = _cached(str(tmp_path / "c"), 5)
    with cache.lease_if_cached(extent(5)) as data:
        assert data is not None
    entry = tmp_path / "c" / "entries" / extent(5).key
    with open(entry, "r+b") as f:
        f.write(b"\0\0\0")
    with cache.lease_if_cached(extent(5)) as data:
        assert data is None
    assert cache.stats.bad_entries == 1 and not entry.exists()


def test_hits_stamp_an_entry_only_when_its_stamp_is_old(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cached(str(tmp_path / "c"), 6)
    stamps = _Counting(monkeypatch, cache_hits, "mark_verified")
    for _ in range(3):  # downloaded just now: stamped then
        with cache.lease_if_cached(extent(6)):
            pass
    assert stamps.calls == 0
    entry = tmp_path / "c" / "entries" / extent(6).key
    old = os.stat(entry).st_mtime_ns - 5 * cache_hits.TOUCH_NS
    os.utime(entry, ns=(old, old))
    cache_verified.mark_verified(str(entry), keep_time=True)  # the node's record names it again
    with cache.lease_if_cached(extent(6)):
        pass
    assert stamps.calls == 1 and os.stat(entry).st_mtime_ns > old + cache_hits.TOUCH_NS
    with cache.lease_if_cached(extent(6)):
        pass
    assert stamps.calls == 1


def test_a_crc_pass_is_recorded_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = _cached(str(tmp_path / "c"), 7)
    (tmp_path / "c" / "verified" / extent(7).key).unlink()
    passes = _Counting(monkeypatch, cache_sums, "_digest")
    with cache.lease_if_cached(extent(7)) as data:
        assert data is not None
    assert passes.calls > 0
    entry = str(tmp_path / "c" / "entries" / extent(7).key)
    assert cache_verified.is_verified(entry, os.stat(entry))


def test_without_mapping_hits_read_by_pread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cached(str(tmp_path / "c"), 2)
    with cache.lease_if_cached(extent(2)) as data:  # smaller than MAP_MIN
        assert data is not None and not isinstance(data, MappedView)
    _map_all(monkeypatch)
    cache._hits.mapped = False  # a network filesystem
    with cache.lease_if_cached(extent(2)) as data:
        assert data is not None and not isinstance(data, MappedView)
        assert data[:50] == payload(2)[:50] and not hasattr(data, "view")


def test_hits_forget_a_file_found_bad(tmp_path: Path) -> None:
    _cached(str(tmp_path / "c"), 1)
    hits = Hits(str(tmp_path / "c"))
    path = str(tmp_path / "c" / "entries" / extent(1).key)
    found = hits.get(path, extent(1), small=False)
    assert found is not None
    found[0].close()
    assert hits._known[extent(1).key] == identity(os.stat(path))
    with open(path, "r+b") as f:  # a change in place: another identity, the record checked
        f.seek(os.path.getsize(path) - 3)
        f.write(b"???")
    assert hits.get(path, extent(1), small=True) is None
    assert extent(1).key not in hits._known


def test_footers_and_small_chunks_are_copied_under_the_lock_not_leased(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = _cached(str(tmp_path / "c"), 9)
    footer = Extent(extent(9).source, 0, SIZE, extent(9).version, FOOTER)  # the same entry
    leases = _Counting(monkeypatch, cache, "_lease")
    with cache.lease_if_cached(footer) as data:
        assert isinstance(data, Copied) and bytes(data) == payload(9)
        assert data.view(3, 9) == payload(9)[3:9] and data.fd == -1
    with cache.lease(footer, lambda: slow_fetch(9, delay=0)) as data:
        assert isinstance(data, Copied) and data[:7] == payload(9)[:7]
    assert leases.calls == 0 and cache.stats.hits == 2 and cache._leases == {}
    chunk = Extent(extent(9).source, 0, SIZE, extent(9).version, "emb")
    with cache.lease_if_cached(chunk) as data:
        assert isinstance(data, Copied) and leases.calls == 0
    with cache.lease_if_cached(extent(9)) as data:  # a whole unit: leased
        assert data is not None and not isinstance(data, Copied) and leases.calls == 1
        assert os.listdir(tmp_path / "c" / "leases")
    assert not os.listdir(tmp_path / "c" / "leases") and cache._leases == {}


def _parquet() -> bytes:
    table = pa.table({"a": list(range(50000)), "b": [float(i) for i in range(50000)]})
    out = io.BytesIO()
    pq.write_table(table, out, row_group_size=10000, compression="none")
    return out.getvalue()


class _Mapped:
    """A piece that hands out views (as a mapped entry does), counting them."""

    def __init__(self, data: bytes) -> None:
        self.data, self.views = data, 0

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: slice) -> bytes:
        return self.data[index]

    def view(self, start: int, stop: int) -> memoryview:
        self.views += 1
        return memoryview(self.data)[start:stop]


def test_a_sparse_file_hands_out_views_and_copies_a_range_across_pieces_once() -> None:
    blob = _parquet()
    cut = len(blob) // 2
    head, tail = _Mapped(blob[:cut]), _Mapped(blob[cut:])
    f = SparseFile(len(blob), [(0, head), (cut, tail)])
    inside = f.read_at(100, 10)
    assert isinstance(inside, memoryview) and inside == blob[10:110] and f.tell() == 0
    across = f.read_at(200, cut - 50)
    assert across == blob[cut - 50 : cut + 150]
    assert f.read_at(200, cut - 50).obj is across.obj  # the copy is kept for a read again
    f.seek(cut + 5)
    assert f.read_buffer(20) == blob[cut + 5 : cut + 25] and f.tell() == cut + 25
    before = tail.views
    read = pq.ParquetFile(RecordingFile(f)).read()  # Arrow reads through read_buffer
    assert read.num_rows == 50000 and read.column("a").to_pylist() == list(range(50000))
    assert tail.views > before  # the footer, a view of the last piece
    f.close()


def test_recording_file_records_failures_of_the_buffer_reads() -> None:
    def gone(a: int, b: int) -> bytes:
        raise OSError("connection reset")

    f = RecordingFile(SparseFile(100, [(0, b"x" * 10)], gone))
    assert f.read_at(5, 0) == b"xxxxx"
    with pytest.raises(OSError):
        f.read_at(20, 50)
    assert isinstance(f.failed, OSError)
    assert not hasattr(RecordingFile(io.BytesIO(b"")), "read_buffer")
    assert zlib.crc32(b"") == 0


def test_the_shared_lock_is_held_while_any_thread_of_the_process_holds_it(
    tmp_path: Path,
) -> None:
    from shardwise.storage.cache.lease import FileLock, SharedLock

    path = str(tmp_path / ".lock")
    shared, exclusive = SharedLock(path), FileLock(path)
    first, second = shared.held(), shared.held()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)  # the other holder still holds it
    assert not exclusive.acquire(timeout=0.05)
    second.__exit__(None, None, None)
    assert exclusive.acquire(timeout=1)
    exclusive.release()
    with shared.held():
        assert not FileLock(path).acquire(shared=False, timeout=0.05)
        reader = FileLock(path)
        assert reader.acquire(shared=True, timeout=1)  # readers share it
        reader.release()
