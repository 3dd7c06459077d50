"""storage/readahead.py: a remote file read start to end in blocks fetched ahead (what
indexing a tar on object storage reads through): the bytes equal the file's whatever the
reads and seeks, each block is fetched once on a forward read, errors come back named, and
local files open as they always did."""

from __future__ import annotations

import io
import os
import tarfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.errors import StorageError
from shardwise.formats.webdataset import WebDatasetFormat
from shardwise.storage import open_sequential, read_locally
from shardwise.storage.readahead import ReadAhead

DATA = os.urandom(10_000)


class Fetcher:
    """``fetch(start, end)`` over DATA, counting the ranges asked for."""

    def __init__(self, data: bytes = DATA) -> None:
        self.data = data
        self.ranges: list[tuple[int, int]] = []
        self.lock = threading.Lock()

    def __call__(self, start: int, end: int) -> bytes:
        with self.lock:
            self.ranges.append((start, end))
        return self.data[start:end]


def test_a_forward_read_fetches_each_block_once() -> None:
    fetch = Fetcher()
    with ReadAhead(fetch, len(DATA), block=1000, ahead=3) as f:
        got = b"".join(iter(lambda: f.read(333), b""))
    assert got == DATA
    assert sorted(fetch.ranges) == [(i, min(i + 1000, len(DATA))) for i in range(0, 10_000, 1000)]


@settings(max_examples=50, deadline=None)
@given(
    ops=st.lists(st.tuples(st.integers(0, 10_500), st.integers(0, 3000)), max_size=20),
    block=st.integers(1, 4000),
    ahead=st.integers(0, 4),
)
def test_reads_and_seeks_return_the_files_bytes(
    ops: list[tuple[int, int]], block: int, ahead: int
) -> None:
    with ReadAhead(Fetcher(), len(DATA), block=block, ahead=ahead) as f:
        for at, n in ops:
            assert f.seek(at) == at
            assert f.read(n) == DATA[at : at + n]
            assert f.tell() == min(at + n, len(DATA)) if at < len(DATA) else at
        f.seek(-10, io.SEEK_END)
        assert f.read() == DATA[-10:]
        buf = bytearray(50)
        f.seek(25)
        assert f.readinto(buf) == 50 and bytes(buf) == DATA[25:75]


def test_an_empty_file_reads_empty() -> None:
    with ReadAhead(Fetcher(b""), 0) as f:
        assert f.read() == b"" and f.read(10) == b""


def test_a_failing_fetch_raises_on_the_read_that_needs_it() -> None:
    def fetch(start: int, end: int) -> bytes:
        if start >= 2000:
            raise StorageError("gone", "s3://b/k")
        return DATA[start:end]

    with ReadAhead(fetch, len(DATA), block=1000, ahead=4) as f:
        assert f.read(1500) == DATA[:1500]
        with pytest.raises(StorageError, match="gone"):
            f.read(1000)


def test_local_files_open_as_before(tmp_path: Path) -> None:
    p = tmp_path / "x.bin"
    p.write_bytes(DATA)
    assert read_locally(str(p)) and read_locally("memory://a/b")
    assert not read_locally("s3://bucket/key")
    with open_sequential(str(p)) as f:
        assert not isinstance(f, ReadAhead) and f.read() == DATA


# --------------------------------------------------------------------------- S3 (SeaweedFS)


@pytest.mark.slow
@pytest.mark.engine
def test_a_tar_on_s3_is_indexed_through_blocks_fetched_ahead(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, fs = bucket
    local = tmp_path / "s.tar"
    with tarfile.open(local, "w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(40):
            info = tarfile.TarInfo(f"{i:03d}.bin")
            info.size = 3000 + i
            tf.addfile(info, io.BytesIO(bytes([i]) * info.size))
    fs.put_file(str(local), f"{name}/s.tar")
    url, opts = f"s3://{name}/s.tar", s3_server["storage_options"]
    with open_sequential(url, block=4096, ahead=2, **opts) as f:
        assert isinstance(f, ReadAhead) and f.read() == local.read_bytes()
        f.seek(1000)
        assert f.read(5000) == local.read_bytes()[1000:6000]
    fmt = WebDatasetFormat(storage_options=opts)
    (unit,) = fmt.list_units(url, local.stat().st_size)
    (here,) = WebDatasetFormat().list_units(str(local), local.stat().st_size)
    assert unit.num_samples == here.num_samples == 40
    assert fmt.read_schema(url) == WebDatasetFormat().read_schema(str(local))
    with pytest.raises(StorageError, match="not found"):
        open_sequential(f"s3://{name}/missing.tar", **opts)
