"""Pages stored as they are inside snappy and zstd streams: the runs found must give back
exactly the bytes the codec decompresses, and anything else must give None.

The streams come from Arrow's own codecs (what pyarrow's writer puts in a file), from
hand-made framing (checksums, trailing bytes, other block types, tiny literals), and from
arbitrary damage to valid streams: whatever runs are found, decompressing the same body
must succeed and agree with them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from _pageopts import SETTINGS as PAGE_SETTINGS
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.formats.parquet import _stored
from shardwise.formats.parquet._stored import MAX_RUNS, MIN_RUN, Runs, one_run, stored_runs
from shardwise.formats.parquet._thrift import Unreadable, varint

SETTINGS = settings(PAGE_SETTINGS, max_examples=200)


def _random(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).bytes(n)


def _compress(codec: str, data: bytes) -> memoryview:
    return memoryview(pa.Codec(codec).compress(data, asbytes=True))


def _bytes(runs: Runs) -> bytes:
    out = np.empty(runs.size, dtype=np.uint8)
    runs.gather(out, np.array([0]), np.array([runs.size]), np.array([0]))
    return out.tobytes()


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
@pytest.mark.parametrize("size", [1, 59, 60, 61, 4096, 65536, 65537, 131072, 300_001])
def test_incompressible_pages_are_found_stored(codec: str, size: int) -> None:
    data = _random(size, size)
    runs = stored_runs(_compress(codec, data), size, codec.upper())
    assert runs is not None
    assert runs.size == size
    assert _bytes(runs) == data


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_compressible_pages_are_not(codec: str) -> None:
    data = bytes(np.random.default_rng(1).integers(0, 3, 200_000, dtype=np.uint8))
    assert stored_runs(_compress(codec, data), len(data), codec.upper()) is None


def test_an_uncompressed_page_is_one_run_and_other_codecs_none() -> None:
    data = _random(5000)
    runs = stored_runs(memoryview(data), 5000, "UNCOMPRESSED")
    assert runs is not None and _bytes(runs) == data
    assert stored_runs(memoryview(data), 4999, "UNCOMPRESSED") is None
    gz = memoryview(pa.Codec("gzip").compress(data, asbytes=True))
    assert stored_runs(gz, 5000, "GZIP") is None


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_an_empty_page(codec: str) -> None:
    runs = stored_runs(_compress(codec, b""), 0, codec.upper())
    assert runs is None or runs.size == 0


@pytest.mark.parametrize("codec", ["snappy", "zstd"])
def test_another_size_than_the_header_says_is_none(codec: str) -> None:
    data = _random(70_000, 3)
    body = _compress(codec, data)
    assert stored_runs(body, 69_999, codec.upper()) is None
    assert stored_runs(body, 70_001, codec.upper()) is None
    assert stored_runs(body[:-1], 70_000, codec.upper()) is None
    assert stored_runs(memoryview(bytes(body) + b"\0"), 70_000, codec.upper()) is None


def _snappy_literals(data: bytes, piece: int) -> bytes:
    """A snappy stream of literals of ``piece`` bytes (a framing no compressor picks)."""
    out = bytearray()
    n = len(data)
    while True:  # the length as a varint
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    for i in range(0, len(data), piece):
        chunk = data[i : i + piece]
        m = len(chunk) - 1
        if m < 60:
            out.append(m << 2)
        else:
            out += bytes([62 << 2]) + m.to_bytes(3, "little")
        out += chunk
    return bytes(out)


def test_hand_made_literals_of_any_length_are_read_and_tiny_ones_declined() -> None:
    data = _random(100_000, 4)
    for piece in (MIN_RUN, 5000, 65536, 100_000):
        body = _snappy_literals(data, piece)
        assert pa.Codec("snappy").decompress(body, len(data), asbytes=True) == data
        runs = stored_runs(memoryview(body), len(data), "SNAPPY")
        assert runs is not None and _bytes(runs) == data
    tiny = _snappy_literals(data, 1)  # 100,000 runs: more than a page is walked in
    assert pa.Codec("snappy").decompress(tiny, len(data), asbytes=True) == data
    assert stored_runs(memoryview(tiny), len(data), "SNAPPY") is None
    assert len(data) // MIN_RUN + 16 < MAX_RUNS


@pytest.mark.parametrize("width", [3, 4, 5, 6, 10])
def test_a_snappy_length_in_more_bytes_than_snappy_reads_is_none(width: int) -> None:
    """The length a snappy stream opens with, written in ``width`` bytes (padded with
    continuation bytes): snappy reads at most 5, and refuses the stream past that
    (Arrow reports the page), so its literals are not read as the page (they were)."""
    data = _random(200_000, 12)
    for body in (_snappy_literals(data, 5000), bytes(_compress("snappy", data))):
        _, at = varint(memoryview(body), 0)
        assert at == 3
        padded = bytearray(body[:2]) + bytes([body[2] | 0x80]) + b"\x80" * (width - 4) + b"\x00"
        stream = bytes(padded[:width]) + body[3:] if width > 3 else body
        try:
            codec: bytes | None = pa.Codec("snappy").decompress(stream, len(data), asbytes=True)
        except OSError:
            codec = None
        assert (codec == data) is (width <= 5)
        runs = stored_runs(memoryview(stream), len(data), "SNAPPY")
        assert (runs is not None and _bytes(runs) == data) is (width <= 5)


def _zstd_frame(blocks: list[tuple[int, bytes]], fhd: int = 0x20, trailer: bytes = b"") -> bytes:
    """A zstd frame of ``blocks`` (type, content) with frame header descriptor ``fhd``
    (single segment and a 1-byte content size by default: the content must be < 256)."""
    size = sum(len(b) if t == 0 else b[1] for t, b in blocks)
    out = bytearray((0xFD2FB528).to_bytes(4, "little")) + bytes([fhd])
    if fhd & 0x20 and not fhd >> 6:
        out.append(size)
    for i, (kind, content) in enumerate(blocks):
        last = i == len(blocks) - 1
        n = len(content) if kind == 0 else content[1]
        out += (int(last) | kind << 1 | n << 3).to_bytes(3, "little")
        out += content if kind == 0 else content[:1]
    return bytes(out) + trailer


def test_zstd_framing_beyond_raw_blocks_is_declined() -> None:
    a, b = _random(100, 5), _random(50, 6)
    raw = _zstd_frame([(0, a), (0, b)])
    assert pa.Codec("zstd").decompress(raw, 150, asbytes=True) == a + b
    runs = stored_runs(memoryview(raw), 150, "ZSTD")
    assert runs is not None and _bytes(runs) == a + b
    rle = _zstd_frame([(0, a), (1, bytes([7, 50]))])  # an RLE block: 50 sevens
    assert pa.Codec("zstd").decompress(rle, 150, asbytes=True) == a + bytes([7]) * 50
    assert stored_runs(memoryview(rle), 150, "ZSTD") is None
    checked = _zstd_frame([(0, a)], fhd=0x24, trailer=b"\0\0\0\0")  # a content checksum
    assert stored_runs(memoryview(checked), 100, "ZSTD") is None
    assert stored_runs(memoryview(raw + b"\0"), 150, "ZSTD") is None


@pytest.mark.parametrize(
    ("fhd", "inserted", "read"),
    [
        (0x21, b"\x07", False),  # a dictionary's id (1 byte): zstd has no dictionary to match
        (0x23, b"\x07\x00\x00\x00", False),
        (0x21, b"\x00", True),  # id 0: no dictionary
        (0x00, bytes([22 << 3]), False),  # a window of 2**32: more than zstd decodes with
        (0x00, bytes([21 << 3 | 7]), True),  # the widest window it takes
    ],
)
def test_zstd_frames_the_codec_refuses_whatever_their_blocks_are_none(
    fhd: int, inserted: bytes, read: bool
) -> None:
    """A frame header naming a dictionary, or a window zstd will not decode with: the
    codec refuses the frame (Arrow reports the page), so its raw blocks are not read as
    the page (they were)."""
    a = _random(100, 10)
    frame = _zstd_frame([(0, a)], fhd=fhd)
    frame = frame[:5] + inserted + frame[5:]  # the window descriptor or the id, after fhd
    try:
        codec: bytes | None = pa.Codec("zstd").decompress(frame, 100, asbytes=True)
    except OSError:
        codec = None
    assert (codec == a) is read
    runs = stored_runs(memoryview(frame), 100, "ZSTD")
    assert (runs is not None and _bytes(runs) == a) is read


def test_values_across_runs_are_copied_whole() -> None:
    data = _random(200_000, 7)
    runs = stored_runs(memoryview(_snappy_literals(data, 5000)), len(data), "SNAPPY")
    assert runs is not None
    starts = np.array([0, 4998, 9999, 12_345, 150_000, 199_990])
    lengths = np.array([5000, 4, 20_002, 1, 49_990, 10])
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    out = np.empty(int(lengths.sum()), dtype=np.uint8)
    runs.gather(out, starts, lengths, offsets)
    want = b"".join(data[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist()))
    assert out.tobytes() == want
    cursor = runs.cursor()
    for pos in (0, 4997, 4998, 4999, 5000, 100_003, 199_996):
        assert cursor.u32(pos) == int.from_bytes(data[pos : pos + 4], "little")
    assert one_run(memoryview(data)).cursor().u32(17) == int.from_bytes(data[17:21], "little")


@st.composite
def _damaged(draw: st.DrawFn) -> tuple[bytes, int, str]:
    codec = draw(st.sampled_from(["snappy", "zstd"]))
    size = draw(st.sampled_from([0, 70, 5000, 70_000, 140_000]))
    data = _random(size, draw(st.integers(0, 99)))
    body = bytearray(_compress(codec, data))
    for _ in range(draw(st.integers(0, 3))):
        if body:
            at = draw(st.integers(0, min(len(body) - 1, 40)))  # the framing is near the start
            body[at] = draw(st.integers(0, 255))
    if draw(st.booleans()) and body:
        body = body[: draw(st.integers(0, len(body)))]
    return bytes(body), draw(st.sampled_from([size, size + 1, max(size - 1, 0)])), codec


@SETTINGS
@given(_damaged())
def test_runs_found_in_any_stream_are_what_the_codec_gives(case: tuple[bytes, int, str]) -> None:
    body, size, codec = case
    runs = stored_runs(memoryview(body), size, codec.upper())
    if runs is None:
        return
    assert runs.size == size
    try:
        got = _bytes(runs)
    except Unreadable:  # a header found wrong as the runs are read (snappy's blocks)
        assert runs.headers is not None
        return
    assert pa.Codec(codec).decompress(body, size, asbytes=True) == got


def _walked(
    body: bytes, size: int, monkeypatch: pytest.MonkeyPatch
) -> list[tuple[int, int]] | None:
    with monkeypatch.context() as m:
        m.setattr(_stored, "_snappy_blocks", lambda *a: None)
        return _stored._snappy(memoryview(body), size)


@pytest.mark.parametrize("size", [1, 60, 61, 256, 257, 65536, 65537, 200_000, 3 << 20])
def test_snappys_own_framing_is_known_without_a_walk_and_as_the_walk_finds_it(
    size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = _random(size, size)
    body = bytes(_compress("snappy", data))
    fast = _stored._snappy_blocks(memoryview(body), size)
    assert fast is not None and fast.headers is not None
    assert list(zip(fast.starts[:-1], fast.sources)) == _walked(body, size, monkeypatch)
    assert fast.headers.checked == 0  # nothing read yet: no header checked
    assert _bytes(fast) == data
    assert fast.headers.checked >= len(fast.sources) - 1


def test_other_framing_is_walked_and_a_damaged_header_stops_the_read_there() -> None:
    data = _random(300_000, 8)
    wide = _snappy_literals(data, 65536)  # 3-byte lengths: not snappy's shortest tags
    assert _stored._snappy_blocks(memoryview(wide), len(data)) is None
    runs = stored_runs(memoryview(wide), len(data), "SNAPPY")
    assert runs is not None and runs.headers is None and _bytes(runs) == data
    body = bytes(_compress("snappy", data))
    _, at = varint(memoryview(body), 0)
    for k in (1, 2, 3):  # the header of block k (not the last, checked at once), byte by byte
        for j in range(3):
            bad = bytearray(body)
            bad[at + k * (65536 + 3) + j] ^= 0x10
            runs = stored_runs(memoryview(bytes(bad)), len(data), "SNAPPY")
            assert runs is not None
            before = np.empty(k * 65536, dtype=np.uint8)  # the blocks before it: as stored
            runs.gather(before, np.array([0]), np.array([k * 65536]), np.array([0]))
            assert before.tobytes() == data[: k * 65536]
            with pytest.raises(Unreadable):
                runs.gather(
                    np.empty(10, np.uint8), np.array([k * 65536 - 5]), np.array([10]), np.array([0])
                )
            with pytest.raises(Unreadable):
                runs.cursor().u32(k * 65536 + 7)


@pytest.mark.parametrize("k", [1, 31, 40])
def test_a_damaged_header_is_found_read_run_by_run_or_many_at_once(k: int) -> None:
    """Headers are checked one by one for a few new runs and all at once for many
    (``FEW_HEADERS``): either way a damaged one stops the read."""
    data = _random(3 << 20, 9)  # 48 blocks
    body = bytearray(_compress("snappy", data))
    _, at = varint(memoryview(bytes(body)), 0)
    body[at + k * (65536 + 3) + 1] ^= 0x01  # a length byte of block k's header
    assert len(data) // 65536 > _stored.FEW_HEADERS + 8

    def runs() -> Any:
        got = stored_runs(memoryview(bytes(body)), len(data), "SNAPPY")
        assert got is not None and got.headers is not None
        return got

    whole = np.empty(len(data), dtype=np.uint8)
    with pytest.raises(Unreadable):  # every header at once
        runs().gather(whole, np.array([0]), np.array([len(data)]), np.array([0]))
    cursor, before = runs().cursor(), k * 65536
    for pos in range(0, before - 4, 65536):  # the blocks before it, one new run at a time
        assert cursor.u32(pos) == int.from_bytes(data[pos : pos + 4], "little")
    with pytest.raises(Unreadable):
        cursor.u32(before + 5)
