"""Cache downloads write their ranges past the page cache (O_DIRECT) where the file system
allows it (storage/cache/fill.py): the aligned head of every range goes direct, the short
tail through the page cache; a file system that refuses direct I/O, at open or at the
first write, gets every byte through the page cache; the published entry is the same
bytes in every case, whatever the object's length."""

from __future__ import annotations

import errno
import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from shardwise.storage.cache import NodeCache
from shardwise.storage.cache import direct as direct_mod
from shardwise.storage.cache.entry import Extent, read_entry
from shardwise.storage.cache.fill import RANGE

DIRECT = getattr(os, "O_DIRECT", 0)


def payload(n: int) -> bytes:
    return (bytes(range(251)) * (n // 251 + 1))[:n]


def ranges_of(data: bytes) -> Callable[[int, int, memoryview], None]:
    def read(start: int, end: int, view: memoryview) -> None:
        view[:] = data[start:end]

    return read


def accepts_direct(where: Path) -> bool:
    """Whether this file system opens files for direct I/O (ext4 and xfs do, tmpfs not)."""
    probe = where / "probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_WRONLY | DIRECT))
    except OSError:
        return False
    finally:
        probe.unlink()
    return bool(DIRECT)


class Writes:
    """Records every write of a fill: (direct?, length)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, refuse: bool = False) -> None:
        self.seen: list[tuple[bool, int]] = []
        self.lock = threading.Lock()
        real = direct_mod._pwrite_all

        def spy(fd: int, view: memoryview, at: int) -> None:
            direct = bool(fcntl.fcntl(fd, fcntl.F_GETFL) & DIRECT) if DIRECT else False
            if direct and refuse:
                raise OSError(errno.EINVAL, "refused")
            with self.lock:
                self.seen.append((direct, len(view)))
            real(fd, view, at)

        monkeypatch.setattr(direct_mod, "_pwrite_all", spy)


def fill_one(root: Path, size: int, start: int = 0) -> tuple[NodeCache, Extent, bytes]:
    data = payload(start + size)
    ext = Extent("s3://bucket/obj", start, start + size, "v1")
    cache = NodeCache(str(root), 10**9)
    with cache.lease(ext, lambda: iter(()), read_range=ranges_of(data)) as view:
        assert view is not None
        assert bytes(view[:]) == data[start:]
    deadline = 6000
    while cache._streams._fills and deadline:
        threading.Event().wait(0.01)
        deadline -= 1
    return cache, ext, data[start:]


@pytest.mark.parametrize("size", [1, 4095, 4096, 4097, RANGE, RANGE + 1, 2 * RANGE + 12_345])
def test_the_aligned_heads_go_direct_and_the_entry_is_exact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: int
) -> None:
    writes = Writes(monkeypatch)
    cache, ext, want = fill_one(tmp_path, size, start=1_000)  # the object's offset plays no part
    assert read_entry(os.path.join(cache.root, "entries", ext.key), ext) == want
    assert sum(n for _, n in writes.seen) == size
    direct = sum(n for d, n in writes.seen if d)
    if accepts_direct(tmp_path):
        assert direct == size - size % RANGE + (size % RANGE) // 4096 * 4096
    else:
        assert direct == 0


def test_a_refused_direct_write_falls_back_to_the_page_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = Writes(monkeypatch, refuse=True)
    size = 3 * RANGE + 77
    cache, ext, want = fill_one(tmp_path, size)
    assert read_entry(os.path.join(cache.root, "entries", ext.key), ext) == want
    assert writes.seen and not any(d for d, _ in writes.seen)
    assert sum(n for _, n in writes.seen) == size


def test_a_file_system_without_direct_io_gets_the_same_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(direct_mod, "_DIRECT", 0)
    writes = Writes(monkeypatch)
    cache, ext, want = fill_one(tmp_path, RANGE + 5)
    assert read_entry(os.path.join(cache.root, "entries", ext.key), ext) == want
    assert not any(d for d, _ in writes.seen)
