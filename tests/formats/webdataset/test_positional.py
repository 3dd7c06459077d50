"""Positional reads of a plain tar (formats/webdataset/_positional.py) and the reused memory
of its batches (_buffers.py): runs of members across gaps read whole, a file that ends
early named at the first short member, file objects without a descriptor read as before;
a pooled buffer is never handed out while an Arrow array still holds it."""

from __future__ import annotations

import gc
import io
import os
import tarfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from shardwise.errors import FormatError
from shardwise.formats.webdataset import WebDatasetFormat, _arrays, _buffers, _positional
from shardwise.formats.webdataset._positional import GAP, Positional
from shardwise.storage.cache.entry import EntryView, Extent, open_entry, write_entry
from shardwise.storage.overlay import SparseFile


def _members(spans: list[tuple[int, int]]) -> list[tuple[int, memoryview]]:
    return [(pos, memoryview(bytearray(n))) for pos, n in spans]


@pytest.mark.parametrize("descriptor", [True, False])
def test_runs_across_gaps_read_every_member(tmp_path: Path, descriptor: bool) -> None:
    data = os.urandom(3 * GAP)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    # close members (one run), one far away (a second run), a zero gap, the file's end
    spans = [(0, 10), (600, 1000), (1600, 5), (1605, 7), (GAP * 2 + 100, 300), (3 * GAP - 9, 9)]
    with open(path, "rb") as raw:
        f = raw if descriptor else io.BytesIO(data)
        src = Positional(f, len(data))
        assert (src.fd is not None) == descriptor
        members = _members(spans)
        assert src.read_members(members) is None
    for (pos, n), (_, view) in zip(spans, members):
        assert bytes(view) == data[pos : pos + n]


def test_a_file_that_ends_early_names_the_first_short_member(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 1000)
    with open(path, "rb") as f:
        src = Positional(f, 1000)
        members = _members([(0, 10), (500, 400), (950, 100), (1200, 5)])
        short = src.read_members(members)
    assert short is not None and short[0][0] == 950 and short[1] == 50


def test_many_members_take_several_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_positional, "_IOV", 8)
    data = os.urandom(100 * 64)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    spans = [(i * 64, 40) for i in range(100)]
    with open(path, "rb") as f:
        members = _members(spans)
        assert Positional(f, len(data)).read_members(members) is None
    assert all(bytes(v) == data[p : p + 40] for (p, _), (_, v) in zip(spans, members))


def test_a_wrapper_with_other_bytes_is_not_read_by_descriptor(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(b"y" * 100)
    with open(path, "rb") as f:
        assert Positional(f, 99).fd is None  # not the size the reader sees

        class Compressed(io.BufferedReader):
            compression = "gzip"

        assert Positional(Compressed(f.raw), 100).fd is None


def test_a_pooled_buffer_comes_back_only_when_arrow_lets_it_go() -> None:
    pool = _buffers.BufferPool(keep=64 << 20)
    n = _buffers.MIN_BYTES * 2
    view = pool.take(n)
    view[:] = 7
    arr = pa.Array.from_buffers(
        pa.binary(), 1, [None, pa.py_buffer(np.array([0, n], np.int32)), pa.py_buffer(view)]
    )
    address = view.ctypes.data
    del view
    gc.collect()
    again = pool.take(n)  # the first is still held by ``arr``: new memory
    assert again.ctypes.data != address
    assert arr[0].as_py() == b"\x07" * n
    del arr
    gc.collect()
    third = pool.take(n)
    assert third.ctypes.data == address  # given back once the array was freed


def test_small_buffers_are_not_pooled() -> None:
    pool = _buffers.BufferPool()
    got = pool.take(10)
    assert got.size == 10 and got.base is None and not pool._free


def test_truncated_member_through_the_fast_path(tmp_path: Path) -> None:
    path = tmp_path / "t.tar"
    with tarfile.open(path, "w", format=tarfile.USTAR_FORMAT) as tf:
        for name in ("a.jpg", "b.jpg"):
            info = tarfile.TarInfo(name)
            info.size = 3000
            tf.addfile(info, io.BytesIO(b"z" * 3000))
    fmt = WebDatasetFormat()
    schema = fmt.read_schema(str(path))
    samples = list(_arrays.walk(open(path, "rb"), path.stat().st_size))  # noqa: SIM115
    path.write_bytes(path.read_bytes()[:2000])  # the file shrinks after the walk
    with open(path, "rb") as f, pytest.raises(FormatError, match="truncated member data"):
        _arrays.build(str(path), f, [s for s in samples if s is not None], schema)


def test_reads_cut_short_are_finished_and_the_rest_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``preadv`` may return less than asked before the end (Linux stops at 2 GiB)."""
    real = os.preadv

    def capped(fd: int, buffers: list[memoryview], offset: int) -> int:
        return int(real(fd, [buffers[0][:7]], offset))  # 7 bytes of the first buffer only

    monkeypatch.setattr(os, "preadv", capped)
    monkeypatch.setattr(_positional, "_IOV", 4)
    data = os.urandom(4000)
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    spans = [(i * 300, 100 + i) for i in range(12)]
    with open(path, "rb") as f:
        members = _members(spans)
        assert Positional(f, len(data)).read_members(members) is None
    assert all(bytes(v) == data[p : p + n] for (p, n), (_, v) in zip(spans, members))


def _entry_file(tmp_path: Path, data: bytes) -> tuple[SparseFile, EntryView]:
    """``data`` as a node cache entry (its bytes, then its record) served by a SparseFile."""
    extent = Extent("s3://b/t.tar", 0, len(data), "v1")
    path = str(tmp_path / extent.key)
    write_entry(path, extent, [data])
    view = open_entry(path, extent)
    return SparseFile(len(data), [(0, view)], None, "s3://b/t.tar"), view


def test_a_whole_file_cache_entry_is_read_by_descriptor_up_to_its_size(tmp_path: Path) -> None:
    data = os.urandom(5000)
    f, view = _entry_file(tmp_path, data)
    try:
        src = Positional(f, len(data))
        assert src.fd == view.fd  # the entry's file, read in place
        members = _members([(0, 100), (300, 700), (4900, 100)])
        assert src.read_members(members) is None
        assert [bytes(v) for _, v in members] == [data[:100], data[300:1000], data[4900:]]
        assert src.read(4990, 512) == data[4990:]  # not the record after the bytes
        # a member running past the object's end is short, never filled from the record
        short = src.read_members(_members([(100, 50), (4950, 200)]))
        assert short is not None and short[0][0] == 4950 and short[1] == 50
    finally:
        view.close()


def test_a_cache_entry_in_pieces_is_read_through_the_file_object(tmp_path: Path) -> None:
    data = os.urandom(3000)
    _, view = _entry_file(tmp_path, data)
    try:
        head = SparseFile(len(data), [(0, data[:1000]), (1000, data[1000:])], None, "u")
        assert head.positional_fd() is None and Positional(head, len(data)).fd is None
        part = SparseFile(len(data) + 10, [(0, view)], None, "u")  # the entry ends early
        assert part.positional_fd() is None
    finally:
        view.close()
