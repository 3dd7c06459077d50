"""An entry's checksums (storage/cache/sums.py): a digest per 16 MiB block, the same
whether the blocks come one by one in any order (a download by ranges) or as a stream of
chunks of any size (a whole download); a damaged byte in any block is found; an entry of an
earlier version, with one CRC-32, is still checked by it; a download by ranges is published
without reading its bytes back."""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

import pytest

from shardwise.storage.cache import NodeCache
from shardwise.storage.cache import sums as cache_sums
from shardwise.storage.cache.entry import BadEntry, Extent, open_entry, read_entry, write_entry
from shardwise.storage.cache.sums import BLOCK, Sums, check

LENGTHS = [1, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK + 12_345]


def data(n: int) -> bytes:
    return (bytes(range(256)) * (n // 256 + 1))[:n]


def _by_blocks(b: bytes, order: list[int]) -> str:
    sums = Sums(len(b))
    for i in order:
        sums.block(i, memoryview(b)[i * BLOCK : (i + 1) * BLOCK])
    return sums.text()


def _by_chunks(b: bytes, chunk: int) -> str:
    sums = Sums(len(b))
    for lo in range(0, len(b), chunk):
        sums.feed(b[lo : lo + chunk])
    return sums.text()


@pytest.mark.parametrize("n", LENGTHS)
def test_blocks_in_any_order_and_chunks_of_any_size_give_the_same_digests(
    tmp_path: Path, n: int
) -> None:
    b = data(n)
    blocks = -(-n // BLOCK)
    forward = _by_blocks(b, list(range(blocks)))
    assert _by_blocks(b, list(reversed(range(blocks)))) == forward
    for chunk in (1_000_003, BLOCK, 3 * BLOCK):
        assert _by_chunks(b, chunk) == forward
    path = tmp_path / "f"
    path.write_bytes(b + b"record")
    fd = os.open(path, os.O_RDONLY)
    try:
        assert check(fd, n, {"xxh3": forward})
        assert len(forward) == len(cache_sums.placeholder(n))  # the record's room is exact
    finally:
        os.close(fd)


def test_a_damaged_byte_in_any_block_is_found(tmp_path: Path) -> None:
    n = 2 * BLOCK + 100
    b = bytearray(data(n))
    text = _by_chunks(bytes(b), BLOCK)
    for at in (0, BLOCK - 1, BLOCK, n - 1):
        damaged = bytearray(b)
        damaged[at] ^= 0x40
        path = tmp_path / f"d{at}"
        path.write_bytes(damaged)
        fd = os.open(path, os.O_RDONLY)
        try:
            assert not check(fd, n, {"xxh3": text}), at
        finally:
            os.close(fd)


def test_an_entry_of_an_earlier_version_is_checked_by_its_crc(tmp_path: Path) -> None:
    ext = Extent("s3://bucket/old", 0, 5000, "etag-1")
    body = data(5000)
    path = tmp_path / ext.key
    record = dict(source=ext.source, start=0, end=5000, version="etag-1", length=5000)
    raw = json.dumps({**record, "crc32": f"{zlib.crc32(body):08x}"}).encode()
    path.write_bytes(body + raw + len(raw).to_bytes(8, "little") + b"SWCACHE1")
    assert read_entry(str(path), ext) == body
    with open(path, "r+b") as f:
        f.write(b"X")
    with pytest.raises(BadEntry, match="checksum"):
        open_entry(str(path), ext)


def test_a_whole_download_and_its_check_agree(tmp_path: Path) -> None:
    ext = Extent("s3://bucket/whole", 0, BLOCK + 7, "etag-1")
    body = data(ext.length)
    path = tmp_path / ext.key
    assert write_entry(str(path), ext, [body[:5], body[5:BLOCK], body[BLOCK:]]) == body
    assert read_entry(str(path), ext) == body


def test_a_download_by_ranges_is_published_without_reading_it_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ext = Extent("s3://bucket/ranged", 0, 2 * BLOCK + 99, "etag-1")
    body = data(ext.length)
    digested: list[int] = []
    original = cache_sums._digest

    def counted(b: object) -> int:
        digested.append(len(b))  # type: ignore[arg-type]
        return original(b)

    monkeypatch.setattr(cache_sums, "_digest", counted)

    def read_range(start: int, end: int, view: memoryview) -> None:
        view[:] = body[start:end]

    cache = NodeCache(str(tmp_path / "c"), 10**9)
    with cache.lease(ext, lambda: iter(()), read_range=read_range) as got:
        assert got == body
    deadline = time.monotonic() + 30
    while not cache.has(ext) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert cache.has(ext)
    assert sorted(digested) == [99, BLOCK, BLOCK]  # each range once, as it arrived
    entry = os.path.join(cache.root, "entries", ext.key)
    assert read_entry(entry, ext) == body  # and the record's digests are the bytes'
