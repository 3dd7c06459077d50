"""Entries are renamed into place without ``fsync`` where the kernel names its boot: the
node's record of checked entries names the boot, so after a crash of the machine (a new
boot) an entry whose bytes the crash lost is CRC-checked at its first use, found bad and
downloaded again; where there is no boot id, entries are fsynced as before."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from _cachework import extent, payload, slow_fetch

from shardwise.storage.cache import NodeCache
from shardwise.storage.cache import verified as cache_verified
from shardwise.storage.cache.fill import RANGE
from shardwise.storage.cache.lease import NO_BOOT


class _Fsyncs:
    """Counts ``os.fsync`` calls (they still run)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = os.fsync

        def counted(fd: int) -> None:
            self.calls += 1
            original(fd)

        monkeypatch.setattr(os, "fsync", counted)


def _ranges(data: bytes) -> Callable[[int, int, memoryview], None]:
    def read(start: int, end: int, view: memoryview) -> None:
        view[:] = data[start:end]

    return read


def _download_both_ways(root: Path) -> NodeCache:
    """One entry downloaded by the reader itself, one by ranges on the download threads."""
    cache = NodeCache(str(root), 10**9)
    with cache.lease(extent(1), lambda: slow_fetch(1, delay=0)) as data:
        assert data == payload(1)
    big = payload(2, 2 * RANGE + 5)
    with cache.lease(extent(2, len(big)), lambda: iter(()), read_range=_ranges(big)) as data:
        assert data is not None and bytes(data[:]) == big
    deadline = time.monotonic() + 30  # published by the download thread, after the reads
    while not cache.has(extent(2, len(big))) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.has(extent(2, len(big)))
    return cache


def test_entries_are_not_fsynced_where_the_boot_has_an_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_verified, "boot_id", lambda: "boot-a")
    fsyncs = _Fsyncs(monkeypatch)
    _download_both_ways(tmp_path / "c")
    assert fsyncs.calls == 0


def test_entries_are_fsynced_where_the_boot_has_no_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_verified, "boot_id", lambda: NO_BOOT)
    fsyncs = _Fsyncs(monkeypatch)
    _download_both_ways(tmp_path / "c")
    assert fsyncs.calls == 2  # one per entry, before its rename


def _lose_bytes_in_a_crash(path: Path) -> None:
    """Bytes of the entry that never reached the disk: zeros, same size and mtime."""
    st = os.stat(path)
    with open(path, "r+b") as f:
        f.seek(100)
        f.write(b"\0" * 1000)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def test_after_a_reboot_an_entry_a_crash_damaged_is_checked_and_fetched_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_verified, "boot_id", lambda: "boot-a")
    root = tmp_path / "c"
    with NodeCache(str(root), 10**9).lease(extent(3), lambda: slow_fetch(3, delay=0)):
        pass
    entry = root / "entries" / extent(3).key
    _lose_bytes_in_a_crash(entry)
    # the same boot: the node's record vouches for the file, whose identity is unchanged
    # (as for bit rot, which `shardwise cache verify` is for)
    same_boot = NodeCache(str(root), 10**9)
    with same_boot.lease_if_cached(extent(3)) as data:
        assert data is not None and bytes(data) != payload(3)
    monkeypatch.setattr(cache_verified, "boot_id", lambda: "boot-b")  # the machine rebooted
    after = NodeCache(str(root), 10**9)
    with after.lease_if_cached(extent(3)) as data:
        assert data is None  # CRC-checked, found bad, removed
    assert after.stats.bad_entries == 1 and not entry.exists()
    with after.lease(extent(3), lambda: slow_fetch(3, delay=0)) as data:
        assert data == payload(3)
    assert after.stats.downloads == 1
    again = NodeCache(str(root), 10**9)  # checked in this boot: trusted without a pass
    with again.lease_if_cached(extent(3)) as data:
        assert data is not None and bytes(data) == payload(3)
    assert cache_verified.is_verified(str(entry), os.stat(entry))
