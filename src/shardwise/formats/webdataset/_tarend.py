"""Where a tar shard ends: after its last member only the end-of-archive blocks may follow,
in plain and in gzip-compressed shards alike (tarfile stops quietly at a damaged or cut
header, and that must not read as a shorter, valid shard).

A compressed shard is a stream that cannot seek back, so it is read through a
:class:`StreamRecorder` that keeps its last bytes for the check.
"""

from __future__ import annotations

import tarfile
import zlib
from typing import IO

from shardwise.errors import FormatError

__all__ = ["StreamRecorder", "check_complete", "check_stream_end"]


class StreamRecorder:
    """The decompressed stream of a compressed shard, as tarfile reads it, keeping its
    last bytes: what follows the last member is checked once tarfile stops, and a
    stream cannot seek back to it."""

    KEEP = 1 << 16  # more than tarfile reads ahead (one 10 KiB record) plus a header

    def __init__(self, src: IO[bytes]) -> None:
        self.src = src
        self.pulled = 0  # bytes handed to tarfile so far
        self._kept: list[bytes] = []
        self._kept_bytes = 0

    def read(self, size: int = -1) -> bytes:
        data = self.src.read(size)
        self.pulled += len(data)
        self._kept.append(data)
        self._kept_bytes += len(data)
        while self._kept_bytes - len(self._kept[0]) >= self.KEEP:
            self._kept_bytes -= len(self._kept.pop(0))
        return data

    def since(self, offset: int) -> bytes | None:
        """The bytes from ``offset`` of the stream to what was last read (None when
        they are no longer kept)."""
        back = self.pulled - offset
        if back > self._kept_bytes:
            return None
        return b"".join(self._kept)[self._kept_bytes - back :] if back > 0 else b""


def check_stream_end(tar_path: str, rec: StreamRecorder, tf: tarfile.TarFile) -> None:
    """What follows the last member of a compressed shard: only zero blocks, at least one
    (tarfile stops quietly at a bad or cut header), then the gzip stream's end, whose
    length and CRC gzip checks."""
    place = f"offset {tf.offset} of the uncompressed tar"
    rest, zeros = rec.since(tf.offset), 0
    if rest is None:
        raise FormatError(
            "corrupt tar: the end of the last member is out of reach", tar_path, place
        )
    while rest:
        if rest.strip(b"\0"):
            raise FormatError(
                "corrupt or truncated tar: unreadable data after the last member", tar_path, place
            )
        zeros += len(rest)
        try:
            rest = rec.read(1 << 20)
        except (OSError, EOFError, zlib.error) as exc:
            raise FormatError(
                f"corrupt or truncated gzip stream ({exc})", tar_path, "end of file"
            ) from exc
    if zeros < tarfile.BLOCKSIZE:
        raise FormatError("truncated tar: the end-of-archive blocks are missing", tar_path, place)


def check_complete(tar_path: str, f: IO[bytes], tf: tarfile.TarFile) -> None:
    """tarfile stops quietly at a truncated header or member; check what is left.

    After the last member only zero padding (the end-of-archive blocks) may follow,
    and at least one such block must: without it the file may have been cut exactly
    between two members, which tarfile would read as a shorter, valid archive.
    """
    size = f.seek(0, 2)
    members = tf.getmembers()  # already read: no further I/O
    if members:
        last = members[-1]
        end = last.offset_data + last.size
        if end > size:
            raise FormatError(
                f"truncated tar: member {last.name!r} needs {end} bytes, file has {size}",
                tar_path,
                f"member {last.name}",
            )
    f.seek(tf.offset)
    tail = f.read(64 * 1024)
    if tail.strip(b"\0"):
        raise FormatError(
            "corrupt or truncated tar: unreadable data after the last member",
            tar_path,
            f"offset {tf.offset}",
        )
    if len(tail) < tarfile.BLOCKSIZE:
        raise FormatError(
            "truncated tar: the end-of-archive blocks are missing", tar_path, f"offset {tf.offset}"
        )
