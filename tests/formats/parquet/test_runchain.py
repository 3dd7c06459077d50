"""The runs of a hybrid stream found by numpy equal the runs read one by one: on streams as
encoders write them, cut anywhere, with long headers, and damaged (truncated, an empty
run, bytes flipped), where both must refuse the same streams."""

from __future__ import annotations

import numpy as np
import pytest
from _pageopts import SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from shardwise.formats.parquet._pages import Unreadable, varint
from shardwise.formats.parquet._rle_bitpacked import _run, decode, row_starts
from shardwise.formats.parquet._runchain import chain_runs


def _one_by_one(b: bytes, width: int, n: int) -> list[tuple[int, int, int]]:
    out, got, i = [], 0, 0
    while got < n:
        if i >= len(b):
            raise Unreadable("the stream ended")
        count, value, start, i = _run(memoryview(b), width, i, n - got)
        out.append((count, value, start))
        got += count
    return out


def _varint(v: int) -> bytes:
    out = bytearray()
    while v >= 0x80:
        out.append(v & 0x7F | 0x80)
        v >>= 7
    return bytes(out + bytes([v]))


@st.composite
def _streams(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """A stream of packed and repeated runs (counts up to a few million: headers of 1-4
    bytes), its width, and its number of values."""
    width = draw(st.sampled_from([1, 2, 3, 8, 12, 16, 32]))
    out, n = bytearray(), 0
    for _ in range(draw(st.integers(1, 40))):
        if draw(st.booleans()):
            groups = draw(st.sampled_from([1, 2, 17, 63, 200]))
            out += _varint(groups << 1 | 1) + draw(
                st.binary(min_size=groups * width, max_size=groups * width)
            )
            n += groups * 8
        else:
            count = draw(st.sampled_from([1, 7, 8, 63, 64, 300, 9000, 3_000_000]))
            value = draw(st.integers(0, (1 << width) - 1))
            out += _varint(count << 1) + value.to_bytes((width + 7) // 8, "little")
            n += count
    return bytes(out), width, n


def _long_header(b: bytes, width: int, n: int) -> bool:
    """Whether the run reader meets a header of over 5 bytes before it stops."""
    got = i = 0
    while got < n and i < len(b):
        try:
            if varint(memoryview(b), i)[1] - i > 5:
                return True
            count, _, _, i = _run(memoryview(b), width, i, n - got)
        except Unreadable:
            return False
        got += count
    return False


def _same(b: bytes, width: int, n: int) -> None:
    """chain_runs gives the run reader's runs, refuses what it refuses, or leaves a
    stream with a header of over 5 bytes to it (None)."""
    if _long_header(b, width, n):
        assert chain_runs(memoryview(b), width, n) is None
        return
    try:
        want = _one_by_one(b, width, n)
    except Unreadable:
        with pytest.raises(Unreadable):
            chain_runs(memoryview(b), width, n)
        return
    got = chain_runs(memoryview(b), width, n)
    assert got is not None
    counts, values, starts, end = got
    assert list(zip(counts.tolist(), values.tolist(), starts.tolist())) == want
    last = want[-1]
    size = last[0] // 8 * width if last[1] < 0 else (width + 7) // 8
    assert end.tolist() == [last[2] + size]


@SETTINGS
@given(_streams(), st.data())
def test_runs_found_at_once_equal_runs_read_one_by_one(
    stream: tuple[bytes, int, int], data: st.DataObject
) -> None:
    b, width, n = stream
    _same(b, width, data.draw(st.integers(1, n)))
    _same(b, width, n + data.draw(st.integers(1, 20)))  # past the end: refused by both
    cut = data.draw(st.integers(0, len(b) - 1))
    _same(b[:cut] if cut else b[:1], width, n)  # truncated anywhere


@SETTINGS
@given(_streams(), st.data())
def test_damaged_streams_are_refused_as_the_run_reader_refuses_them(
    stream: tuple[bytes, int, int], data: st.DataObject
) -> None:
    b, width, n = stream
    damaged = bytearray(b)
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(0, len(b) - 1))] = data.draw(st.integers(0, 255))
    _same(bytes(damaged), width, data.draw(st.integers(1, n)))


def test_an_empty_run_or_a_header_past_five_bytes() -> None:
    with pytest.raises(Unreadable):
        chain_runs(memoryview(b"\x00\x01" + b"\x03\xff"), 1, 8)  # a repeated run of 0
    huge = _varint((1 << 40) << 1) + b"\x01"  # a header of 6 bytes: left to the run loop
    assert chain_runs(memoryview(huge), 1, 10) is None
    with pytest.raises(Unreadable):  # which refuses it, as Arrow does
        row_starts(memoryview(huge), 10)
    assert chain_runs(memoryview(_varint(5 << 1) + b"\x00" + huge), 1, 10) is None


@pytest.mark.parametrize(
    "header",
    [
        (1 << 31) << 1,  # a repeated run of 2**31: a header past 32 bits, in 5 bytes
        (1 << 33) << 1,
        ((1 << 31) // 8) << 1 | 1,  # a packed run past 2**31 - 1 values
    ],
)
def test_a_header_arrow_stops_at_is_refused_by_both_readers(header: int) -> None:
    """Arrow reads a run's header as a varint of at most 32 bits, and a packed run of at
    most 2**31 - 1 values: a stream with any other is one it stops at, so both readers
    refuse it (a run of 2**31 - 1 is still read)."""
    b = memoryview(_varint(header) + b"\x01" * 8)
    assert len(_varint(header)) == 5
    with pytest.raises(Unreadable):
        chain_runs(b, 1, 10)
    with pytest.raises(Unreadable):
        _one_by_one(bytes(b), 1, 10)
    most = memoryview(_varint(((1 << 31) - 1) << 1) + b"\x01")
    assert decode(most, 1, 10).tolist() == [1] * 10
    assert row_starts(most, 10).tolist() == []


@SETTINGS
@given(st.lists(st.integers(1, 5000), min_size=1, max_size=60), st.data())
def test_row_starts_of_token_lists_levels(lengths: list[int], data: st.DataObject) -> None:
    """Repetition levels as Arrow's encoder writes lists: each row a 0 then 1s, the 1s a
    repeated run once eight or more, the rest bit-packed with their neighbours."""
    levels = np.concatenate([np.r_[0, np.ones(k - 1, dtype=np.int64)] for k in lengths])
    b = _encode(levels)
    n = data.draw(st.integers(1, len(levels)))
    assert decode(memoryview(b), 1, n).tolist() == levels[:n].tolist()
    assert row_starts(memoryview(b), n).tolist() == np.flatnonzero(levels[:n] == 0).tolist()


def _encode(levels: np.ndarray) -> bytes:
    """Levels of width 1 as a hybrid stream: runs of 8+ equal values repeated, the rest
    packed in groups of 8 (a last group padded with ones)."""
    out, i = bytearray(), 0
    while i < len(levels):
        same = int(np.argmax(levels[i:] != levels[i])) or len(levels) - i
        if same >= 8:
            out += _varint(same << 1) + bytes([int(levels[i])])
            i += same
            continue
        group = np.ones(8, dtype=np.uint8)
        part = levels[i : i + 8]
        group[: len(part)] = part
        out += _varint(1 << 1 | 1) + np.packbits(group, bitorder="little").tobytes()
        i += len(part)
    return bytes(out)
