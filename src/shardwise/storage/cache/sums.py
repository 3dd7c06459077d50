"""The checksum of a cache entry's bytes: an xxh3-64 digest of each block.

An entry's bytes are cut into blocks of :data:`BLOCK` bytes from its start (the last one
shorter), and each block gets its own digest. A download by ranges (one block per range)
digests each range in the memory it arrived in, in whatever order the ranges come, so
publishing an entry reads nothing back from its file; a whole download digests its chunks
as they stream past. Checking an entry reads it block by block.

Entries written before these digests carry one CRC-32 of all their bytes instead; they
are still checked by it (:func:`check`).
"""

from __future__ import annotations

import os
import zlib
from typing import Any

import xxhash

__all__ = ["BLOCK", "Sums", "check", "placeholder"]

BLOCK = 16 * 2**20
_WIDTH = 16  # hex digits of one digest


def _digest(data: Any) -> int:
    return xxhash.xxh3_64_intdigest(data)


def _blocks(length: int) -> int:
    return max(1, -(-length // BLOCK))


def _text(digests: list[int]) -> str:
    return ",".join(f"{d:0{_WIDTH}x}" for d in digests)


def placeholder(length: int) -> str:
    """A text as long as the digests of ``length`` bytes (room for the record)."""
    return _text([0] * _blocks(length))


class Sums:
    """The digests of one entry's blocks, given block by block (:meth:`block`, any order)
    or as a stream of chunks (:meth:`feed`, in order)."""

    def __init__(self, length: int) -> None:
        self._length = length
        self._digests = [0] * _blocks(length) if length else [_digest(b"")]
        self._stream = xxhash.xxh3_64()
        self._fed = 0

    def block(self, i: int, data: Any) -> None:
        """Block ``i`` is ``data`` (all of it: the last block may be shorter)."""
        self._digests[i] = _digest(data)

    def feed(self, data: Any) -> None:
        """The next ``data`` bytes of the entry, in order."""
        view = memoryview(data).cast("B")[: self._length - self._fed]  # more is refused later
        while view:
            room = BLOCK - self._fed % BLOCK
            part, view = view[:room], view[room:]
            self._stream.update(part)
            self._fed += len(part)
            if self._fed % BLOCK == 0 or self._fed == self._length:
                self._digests[(self._fed - 1) // BLOCK] = self._stream.intdigest()
                self._stream.reset()

    def text(self) -> str:
        """The digests, as the record keeps them."""
        return _text(self._digests)


def check(fd: int, length: int, record: dict[str, Any]) -> bool:
    """True if the first ``length`` bytes of ``fd`` match the record's digests (or, for an
    entry of before them, its CRC-32)."""
    step = BLOCK
    if "xxh3" not in record:
        crc = 0
        for lo in range(0, length, step):
            crc = zlib.crc32(os.pread(fd, min(step, length - lo), lo), crc)
        return f"{crc:08x}" == record.get("crc32")
    digests = [_digest(os.pread(fd, min(step, length - lo), lo)) for lo in range(0, length, step)]
    return bool(_text(digests or [_digest(b"")]) == record["xxh3"])
