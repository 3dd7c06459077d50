"""Ranged reads into a buffer (storage/ranged.py): the bytes of a real SeaweedFS object; a
changed object (ETag) and a missing one are StorageErrors naming the URL; a body cut
mid-range resumes from its first missing byte, nothing asked for twice."""

from __future__ import annotations

import io
from typing import Any

import pytest

from shardwise.errors import StorageError
from shardwise.storage.ranged import _s3_into, into_reader

DATA = bytes(range(256)) * 4096  # 1 MiB


def _put(fs: Any, name: str, data: bytes) -> str:
    fs.pipe_file(name, data)
    return str(fs.info(name)["ETag"]).strip('"')


@pytest.mark.engine
def test_ranges_of_a_real_object_and_a_changed_one(
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
) -> None:
    name, fs = bucket
    etag = _put(fs, f"{name}/obj.bin", DATA)
    read = into_reader(f"s3://{name}/obj.bin", s3_server["storage_options"], etag)
    view = memoryview(bytearray(300_000))
    read(12_345, 312_345, view)
    assert bytes(view) == DATA[12_345:312_345]
    _put(fs, f"{name}/obj.bin", DATA[::-1])
    with pytest.raises(StorageError, match=rf"s3://{name}/obj.bin.*changed"):
        read(0, 100, memoryview(bytearray(100)))
    missing = into_reader(f"s3://{name}/nothing.bin", s3_server["storage_options"])
    with pytest.raises(StorageError, match="not found"):
        missing(0, 100, memoryview(bytearray(100)))


class _Cut(io.RawIOBase):
    """A body that serves ``data`` then drops the connection after ``cut`` bytes."""

    def __init__(self, data: bytes, cut: int | None) -> None:
        self.data, self.cut, self.pos = data, cut, 0

    def readinto(self, b: Any) -> int:
        if self.cut is not None and self.pos >= self.cut:
            raise ConnectionResetError("connection reset by peer")
        end = len(self.data) if self.cut is None else self.cut
        n = min(len(b), end - self.pos, 65_536)
        b[:n] = self.data[self.pos : self.pos + n]
        self.pos += n
        return n


class _Client:
    """Answers ranged GETs of DATA, dropping the first body after 100,000 bytes."""

    def __init__(self) -> None:
        self.ranges: list[str] = []

    def get_object(self, **args: Any) -> dict[str, Any]:
        self.ranges.append(args["Range"])
        lo, hi = (int(x) for x in args["Range"][len("bytes=") :].split("-"))
        cut = 100_000 if len(self.ranges) == 1 else None
        return {"Body": _Cut(DATA[lo : hi + 1], cut)}


def test_a_dropped_connection_resumes_the_range_where_it_stopped() -> None:
    client = _Client()
    view = memoryview(bytearray(500_000))
    _s3_into(client, "s3://b/k", "b", "k", "", 1_000, 501_000, view)
    assert bytes(view) == DATA[1_000:501_000]
    assert client.ranges == ["bytes=1000-500999", "bytes=101000-500999"]
