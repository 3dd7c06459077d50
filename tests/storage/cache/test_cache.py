"""The node cache's protocol with real processes on one directory: each range downloaded
once per node, the budget never exceeded on disk, leased entries never evicted, and
nothing a ``kill -9`` leaves behind blocks, hangs or corrupts a later user."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _cachework import (
    SIZE,
    disk_bytes,
    extent,
    hold_lease,
    lease_all,
    payload,
    slow_fetch,
    stuck_download,
    wait_for,
)

from shardwise.cli import main
from shardwise.errors import ConfigError
from shardwise.storage.cache import NodeCache
from shardwise.storage.cache import sums as cache_sums
from shardwise.storage.cache.admin import clear_cache, verify_cache
from shardwise.storage.cache.entry import EntryView, Extent, read_entry
from shardwise.storage.cache.lease import boot_id, is_alive, owner_id

CTX = mp.get_context("spawn")
ENTRY = SIZE + len(extent(0).record())  # bytes one entry takes on disk


def _start(target: object, *args: object) -> mp.process.BaseProcess:
    p = CTX.Process(target=target, args=args, daemon=True)
    p.start()
    return p


def _kill(p: mp.process.BaseProcess) -> None:
    assert p.pid is not None
    os.kill(p.pid, signal.SIGKILL)
    p.join(30)


def _downloads(cache: NodeCache) -> list[str]:
    return [r["key"] for r in cache.journal() if r["kind"] == "download"]


def test_keys_differ_by_source_range_and_version() -> None:
    base = Extent("s3://b/k", 0, 10, "e1:10")
    others = [
        Extent("s3://b/k2", 0, 10, "e1:10"),
        Extent("s3://b/k", 0, 11, "e1:10"),
        Extent("s3://b/k", 1, 10, "e1:10"),
        Extent("s3://b/k", 0, 10, "e2:10"),
        Extent("http://other:9000|s3://b/k", 0, 10, "e1:10"),
    ]
    assert len({base.key, *(o.key for o in others)}) == 6


def test_bad_arguments_are_config_errors(tmp_path: Path) -> None:
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ConfigError, match="cache_bytes"):
            NodeCache(str(tmp_path), bad)  # type: ignore[arg-type]


def test_two_processes_download_each_range_once(tmp_path: Path) -> None:
    root, ids = str(tmp_path / "c"), list(range(24))
    procs = [
        _start(lease_all, root, 10**8, order, str(tmp_path / f"r{n}"))
        for n, order in enumerate([ids, ids[::-1]])
    ]
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    stats = [tuple(map(int, (tmp_path / f"r{n}").read_text().split())) for n in range(2)]
    downloads = _downloads(NodeCache(root, 10**8))
    assert sorted(downloads) == sorted(extent(i).key for i in ids)  # each once, across both
    assert sum(d for d, _ in stats) == len(ids) and sum(h for _, h in stats) == len(ids)


def test_budget_holds_and_a_leased_entry_is_never_evicted(tmp_path: Path) -> None:
    root, budget = str(tmp_path / "c"), 4 * ENTRY + 100
    holder = _start(hold_lease, root, budget, 0, str(tmp_path / "ready"))
    wait_for(str(tmp_path / "ready"))
    peak, stop = [0], threading.Event()
    cache = NodeCache(root, budget)

    def sample() -> None:
        # under the node's lock (shared) the listing is one moment: eviction and reservation
        # happen under it exclusively; a listing without it can count an entry about to be
        # evicted together with the part that replaces it
        while not stop.is_set():
            with cache._global().held(shared=True):
                peak[0] = max(peak[0], disk_bytes(root))
            time.sleep(0.001)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        for i in range(1, 30):
            with cache.lease(extent(i), lambda i=i: slow_fetch(i, delay=0.002)) as data:
                assert data == payload(i)
            assert os.path.exists(os.path.join(root, "entries", extent(0).key))  # leased: kept
    finally:
        stop.set()
        sampler.join()
    assert ENTRY * 3 < peak[0] <= budget
    assert cache.stats.evictions >= 25
    _kill(holder)  # its lease is now stale: the entry may go
    for i in range(30, 36):
        with cache.lease(extent(i), lambda i=i: slow_fetch(i, delay=0)):
            pass
    assert not os.path.exists(os.path.join(root, "entries", extent(0).key))
    assert not os.listdir(os.path.join(root, "leases"))
    assert disk_bytes(root) <= budget


def test_sigkill_during_a_download_blocks_nothing(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    p = _start(stuck_download, root, 10**7, 3, str(tmp_path / "ready"))
    wait_for(str(tmp_path / "ready"))
    assert os.listdir(os.path.join(root, "tmp"))  # a partial download on disk
    _kill(p)
    cache = NodeCache(root, 10**7)
    t0 = time.monotonic()
    with cache.lease(extent(3), lambda: slow_fetch(3, delay=0)) as data:
        assert data == payload(3)  # the partial file was never trusted
    assert time.monotonic() - t0 < 5  # the dead downloader's lock did not hold us up
    assert cache.stats.downloads == 1
    with cache.lease(extent(4), lambda: slow_fetch(4, delay=0)):
        pass
    assert os.listdir(os.path.join(root, "tmp")) == []  # its partial file was cleaned
    assert verify_cache(root).bad == []


def test_a_stuck_download_makes_others_wait_not_download_again(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    p = _start(stuck_download, root, 10**7, 5, str(tmp_path / "ready"))
    wait_for(str(tmp_path / "ready"))
    cache = NodeCache(root, 10**7, lock_timeout=0.5)
    with cache.lease(extent(5), lambda: slow_fetch(5, delay=0)) as data:
        assert data is None  # waited for the other download, then read without caching
    assert cache.stats.downloads == 0 and cache.stats.read_through == 1
    _kill(p)


def test_when_everything_is_leased_it_reads_through(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    cache = NodeCache(root, ENTRY + 10, wait_seconds=0.3)
    with cache.lease(extent(1), lambda: slow_fetch(1, delay=0)) as first:
        assert first == payload(1)
        with cache.lease(extent(2), lambda: slow_fetch(2, delay=0)) as second:
            assert second is None
        assert disk_bytes(root) <= ENTRY + 10
    assert cache.stats.read_through == 1
    too_big = Extent("s3://b/huge", 0, 10 * SIZE, "e")
    with cache.lease(too_big, lambda: iter([b"x" * 10 * SIZE])) as data:
        assert data is None


def test_stale_leases_of_a_dead_process_or_another_boot_are_ignored(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    cache = NodeCache(root, ENTRY + 10)
    with cache.lease(extent(1), lambda: slow_fetch(1, delay=0)):
        pass
    me = owner_id()
    assert is_alive(me)
    boot, pid, start = me.rsplit("-", 2)
    for owner in (
        f"{'0' * 16}-{pid}-{start}",
        f"{boot}-{pid}-{int(start) + 1}",
        f"{boot}-999999999-5",
    ):
        assert not is_alive(owner)
        (Path(root) / "leases" / f"{extent(1).key}.{owner}").touch()
    assert boot == boot_id()
    with cache.lease(extent(2), lambda: slow_fetch(2, delay=0)) as data:
        assert data == payload(2)  # extent 1 was evicted despite the stale leases
    assert not (Path(root) / "entries" / extent(1).key).exists()


def test_verify_finds_corrupted_and_truncated_entries(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path / "c")
    cache = NodeCache(root, 10**7)
    for i in range(4):
        with cache.lease(extent(i), lambda i=i: slow_fetch(i, delay=0)):
            pass
    flipped = Path(root) / "entries" / extent(1).key
    blob = bytearray(flipped.read_bytes())
    blob[100] ^= 0xFF
    flipped.write_bytes(bytes(blob))
    cut = Path(root) / "entries" / extent(2).key
    cut.write_bytes(cut.read_bytes()[:1000])
    assert main(["cache", "verify", str(tmp_path / "c")]) == 1
    out = capsys.readouterr().out
    assert "checksum mismatch" in out and extent(1).key in out and extent(2).key in out
    assert "4 entries checked, 2 bad, 2 removed" in out
    assert main(["cache", "verify", root]) == 0
    with cache.lease(extent(1), lambda: slow_fetch(1, delay=0)) as data:
        assert data == payload(1)
    assert read_entry(str(Path(root) / "entries" / extent(1).key), extent(1)) == payload(1)


def test_a_corrupted_entry_is_downloaded_again_not_used(tmp_path: Path) -> None:
    root = str(tmp_path / "c")
    cache = NodeCache(root, 10**7)
    with cache.lease(extent(7), lambda: slow_fetch(7, delay=0)):
        pass
    entry = Path(root) / "entries" / extent(7).key
    entry.write_bytes(b"Z" + entry.read_bytes()[1:])
    with cache.lease(extent(7), lambda: slow_fetch(7, delay=0)) as data:
        assert data == payload(7)
    assert cache.stats.bad_entries == 1 and cache.stats.downloads == 2


class _CountingDigest:
    """The entries' block digest, counting the bytes its checking passes read."""

    def __init__(self, original: Callable[[Any], int]) -> None:
        self.bytes = 0
        self._original = original

    def __call__(self, data: Any) -> int:
        self.bytes += len(data)
        return self._original(data)


def test_a_hit_reads_only_the_ranges_asked_and_the_crc_once_per_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = str(tmp_path / "c")
    cache = NodeCache(root, 10**7)
    with cache.lease(extent(8), lambda: slow_fetch(8, delay=0)):
        pass
    counting = _CountingDigest(cache_sums._digest)
    monkeypatch.setattr(cache_sums, "_digest", counting)
    with cache.lease(extent(8), lambda: slow_fetch(8, delay=0)) as data:  # downloaded here: no pass
        assert isinstance(data, EntryView) and len(data) == SIZE
        assert data[100:110] == payload(8)[100:110] and data[-4:] == payload(8)[-4:]
    assert counting.bytes == 0
    result = str(tmp_path / "new-process")
    p = _start(
        lease_all, root, 10**7, [8], result
    )  # another process: a hit, trusted (and counted by it)
    p.join(60)
    assert p.exitcode == 0 and Path(result).read_text() == "0 1"
    (Path(root) / "verified" / extent(8).key).unlink()  # nobody vouches for the file now
    with cache.lease(extent(8), lambda: slow_fetch(8, delay=0)) as data:
        assert data is not None and bytes(data) == payload(8)
    assert counting.bytes == SIZE  # checked once, and recorded again
    with cache.lease(extent(8), lambda: slow_fetch(8, delay=0)) as data:
        assert data is not None and data[:10] == payload(8)[:10]
    assert counting.bytes == SIZE and cache.stats.downloads == 1 and cache.stats.bad_entries == 0


@pytest.mark.parametrize("change", ["in place", "replaced", "truncated"])
def test_an_entry_changed_since_it_was_verified_is_checked_and_fetched_again(
    tmp_path: Path, change: str
) -> None:
    root = str(tmp_path / "c")
    cache = NodeCache(root, 10**7)
    for _ in range(2):  # downloaded, then a hit: the node's record names this file
        with cache.lease(extent(8), lambda: slow_fetch(8, delay=0)):
            pass
    entry = Path(root) / "entries" / extent(8).key
    blob = entry.read_bytes()
    bad = blob[:5] + bytes([blob[5] ^ 0xFF]) + blob[6:]
    if change == "in place":  # same file, same size, the record still matches
        with open(entry, "r+b") as f:
            f.write(bad[:6])
    elif change == "replaced":
        entry.with_suffix(".new").write_bytes(bad)
        os.replace(entry.with_suffix(".new"), entry)
    else:
        entry.write_bytes(blob[: len(blob) // 2])
    result = str(tmp_path / "new-process")
    p = _start(
        lease_all, root, 10**7, [8], result
    )  # a new process finds it bad and downloads it again
    p.join(60)
    assert p.exitcode == 0 and Path(result).read_text() == "1 0"
    assert read_entry(str(entry), extent(8)) == payload(8)
    with open(entry, "r+b") as f:  # and so does a process that used it before
        f.write(bad[:6])
    with cache.lease(extent(8), lambda: slow_fetch(8, delay=0)) as data:
        assert data is not None and bytes(data) == payload(8)
    assert cache.stats.bad_entries == 1 and cache.stats.downloads == 2


def test_clear_keeps_what_a_live_process_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = str(tmp_path / "c")
    holder = _start(hold_lease, root, 10**7, 0, str(tmp_path / "ready"))
    wait_for(str(tmp_path / "ready"))
    cache = NodeCache(root, 10**7)
    for i in range(1, 4):
        with cache.lease(extent(i), lambda i=i: slow_fetch(i, delay=0)):
            pass
    assert main(["cache", "clear", root]) == 0
    assert "removed 3 entries" in capsys.readouterr().out
    assert os.listdir(os.path.join(root, "entries")) == [extent(0).key]
    report = clear_cache(root, all=True)
    assert report.removed == 1 and os.listdir(os.path.join(root, "entries")) == []
    _kill(holder)
    assert main(["cache", "verify", str(tmp_path / "nothing-here")]) == 1


def test_sparse_file_serves_pieces_and_reads_the_gaps_remotely() -> None:
    import random

    from shardwise.storage.overlay import SparseFile

    blob = bytes(random.Random(0).randrange(256) for _ in range(5000))
    asked: list[tuple[int, int]] = []

    def remote(a: int, b: int) -> bytes:
        asked.append((a, b))
        return blob[a:b]

    f = SparseFile(
        len(blob), [(4, blob[4:1200]), (3000, blob[3000:]), (1100, blob[1100:1500])], remote
    )
    rng = random.Random(1)
    for _ in range(300):
        a = rng.randrange(len(blob) + 10)
        n = rng.randrange(-1, 2500)
        f.seek(a)
        want = blob[a:] if n < 0 else blob[a : a + n]
        assert (f.read(n) == want and f.tell() == min(len(blob), a + len(want))) or a >= len(blob)
    assert asked and all(b <= 1100 or a >= 1500 for a, b in asked if a < 3000)  # only the gaps
    f.seek(0, 2)
    assert f.tell() == 5000 and f.read(10) == b""


def test_verify_takes_a_cache_without_its_tmp_directory(tmp_path: Path) -> None:
    for d in ("entries", "leases"):
        (tmp_path / d).mkdir()
    report = verify_cache(str(tmp_path))
    assert report.checked == 0 and report.bad == []
