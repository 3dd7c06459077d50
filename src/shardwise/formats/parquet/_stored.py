"""A compressed page whose bytes are stored as they are: where in its body each run of them is.

Incompressible values (JPEG, PNG, audio, already compressed documents) come out of the
codecs almost unchanged: snappy writes them as *literals* (a tag, then the bytes, up to
64 KiB at a time), zstd as *raw blocks* (a 3-byte header, then up to 128 KiB of bytes).
Decompressing such a page only copies it, into as much new memory as the page: 25-35 MB
for a unit of images, most of a head's read when only a few of its values are wanted.

:func:`stored_runs` reads the stream's framing only and, when every byte of the page is
stored so, gives the runs (:class:`Runs`): a value can then be copied straight out of the
page's body (a memory-mapped file), and nothing is decompressed. A stream with anything
else in it (a snappy copy, a compressed or RLE zstd block, a checksum, a skippable frame,
a frame zstd refuses whatever its blocks, another codec) or a framing that does not add
up to exactly ``size`` bytes gives None, and the caller decompresses the page as before
(whose decoder then judges the stream).
Framing too fine to be worth walking in Python (runs of less than :data:`MIN_RUN` bytes
on average) gives None too, so a hostile stream of one-byte literals costs no more than
:data:`MAX_RUNS` steps.

Snappy's own compressor frames incompressible bytes the same way every time: a literal
of each 64 KiB block of its input. A stream whose length and last literal say it is so
framed is not walked: its runs are known, and each run's header is checked as the run is
first read (:class:`Headers`). A head of a unit of images reads 25 values of a 35 MB
dictionary page, and walking all of its 540 literals touched a page of the mapped file for
each.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.formats.parquet._thrift import Unreadable, varint

__all__ = ["MAX_RUNS", "MIN_RUN", "Cursor", "Runs", "one_run", "stored_runs"]

MIN_RUN = 4096  # bytes a run holds on average, at least (snappy's are 64 KiB, zstd's 128 KiB)
MAX_RUNS = 1 << 16  # runs walked in one page, at most
ZSTD_MAGIC = 0xFD2FB528
SNAPPY_BLOCK = 1 << 16  # snappy's compressor works in blocks of this many input bytes
FEW_HEADERS = 32  # headers checked one by one in Python (more: by numpy, at once)


@dataclass(frozen=True)
class Runs:
    """The page's ``size`` bytes as runs of its ``body``: run ``i`` is the page's bytes
    ``[starts[i], starts[i + 1])``, stored from ``body[sources[i]]`` on."""

    body: memoryview  # unsigned bytes: the compressed body, or the decompressed page
    starts: list[int]  # one more than the runs: the last is the page's size
    sources: list[int]
    headers: Headers | None = None  # the runs' headers still to check before their use

    @property
    def size(self) -> int:
        """The page's size."""
        return self.starts[-1]

    def check_all(self) -> None:
        """Check every run's header still unchecked (a read that claims the whole page)."""
        if self.headers is not None:
            self.headers.check(len(self.sources) - 1)

    def cursor(self) -> Cursor:
        """A reader of the page's bytes from its start on, for reads at rising places."""
        return Cursor(self)

    def gather(
        self, out: np.ndarray, starts: np.ndarray, lengths: np.ndarray, offsets: np.ndarray
    ) -> None:
        """Copy the page's bytes ``[starts[j], starts[j] + lengths[j])`` to
        ``out[offsets[j]:]`` for every ``j``."""
        src = np.frombuffer(self.body, dtype=np.uint8)
        if len(self.sources) == 1:  # one run: slices of it
            base = self.sources[0]
            for s, n, o in zip(starts.tolist(), lengths.tolist(), offsets.tolist()):
                out[o : o + n] = src[base + s : base + s + n]
            return
        runs = np.searchsorted(self.starts, starts, side="right") - 1
        if self.headers is not None and len(starts):
            last = np.searchsorted(self.starts, starts + np.maximum(lengths, 1) - 1, "right")
            self.headers.check(int(last.max()) - 1)
        for s, n, o, i in zip(starts.tolist(), lengths.tolist(), offsets.tolist(), runs.tolist()):
            while n > 0:  # the value's part in run i, then the next run's
                take = min(self.starts[i + 1] - s, n)
                at = self.sources[i] + s - self.starts[i]
                out[o : o + take] = src[at : at + take]
                s, n, o, i = s + take, n - take, o + take, i + 1


class Cursor:
    """Reads of a page's :class:`Runs` at rising places (its values' length prefixes)."""

    def __init__(self, runs: Runs) -> None:
        self.runs, self.i = runs, 0

    def u32(self, pos: int) -> int:
        """The little-endian 32-bit integer at ``pos`` (at or past the last read's)."""
        starts, sources, body = self.runs.starts, self.runs.sources, self.runs.body
        while starts[self.i + 1] <= pos:
            self.i += 1
        i = self.i
        if self.runs.headers is not None:
            self.runs.headers.check(i)
        if pos + 4 <= starts[i + 1]:
            at = sources[i] + pos - starts[i]
            return int.from_bytes(body[at : at + 4], "little")
        out = np.empty(4, dtype=np.uint8)  # across runs
        self.runs.gather(out, np.array([pos]), np.array([4]), np.array([0]))
        return int.from_bytes(out.tobytes(), "little")


class Headers:
    """The headers of a stream's runs, checked only as far as the runs read need
    (:func:`_snappy_blocks`): a head of a unit reads the first few of a page's hundreds.
    The stream's bytes up to a checked run decode as the runs say whatever follows, so a
    value read from checked runs is the page's; a header not as expected raises
    :class:`Unreadable` (the column is then left to Arrow)."""

    def __init__(self, body: memoryview, heads: np.ndarray, expected: bytes) -> None:
        self.body, self.heads, self.expected = body, heads, expected
        self.starts: list[int] = heads.tolist()
        self.checked = 0  # runs whose headers are checked

    def check(self, i: int) -> None:
        """Check the headers of runs up to ``i``: a few one by one (a head's values' length
        prefixes reach a new run each, and three numpy comparisons a run took a fifth of a
        head's read of images), more at once."""
        if i < self.checked:
            return
        if i + 1 - self.checked <= FEW_HEADERS:
            width, body, want = len(self.expected), self.body, self.expected
            ok = True
            for h in self.starts[self.checked : i + 1]:
                if body[h : h + width] != want:
                    ok = False
                    break
        else:
            heads, data = self.heads[self.checked : i + 1], np.frombuffer(self.body, np.uint8)
            ok = all(bool((data[heads + k] == b).all()) for k, b in enumerate(self.expected))
        if not ok:
            raise Unreadable("a snappy literal not as its block's size says")
        self.checked = i + 1


def one_run(page: memoryview) -> Runs:
    """A page's bytes held in one buffer (decompressed, or stored uncompressed)."""
    return Runs(page, [0, len(page)], [0])


def stored_runs(body: memoryview, size: int, codec: str) -> Runs | None:
    """The runs of a page of ``size`` bytes whose ``body`` (compressed by ``codec``) stores
    every byte as it is, or None (see the module docstring)."""
    if codec == "UNCOMPRESSED":
        runs: list[tuple[int, int]] | None = [(0, 0)] if len(body) == size else None
    elif codec == "SNAPPY":
        regular = _snappy_blocks(body, size)
        if regular is not None:
            return regular
        runs = _snappy(body, size)
    elif codec == "ZSTD":
        runs = _zstd(body, size)
    else:
        runs = None
    if runs is None or not runs:  # (an empty page needs no runs: it is read as one)
        return None if size or runs is None else Runs(body, [0, 0], [0])
    return Runs(body, [s for s, _ in runs] + [size], [f for _, f in runs])


def _limit(size: int) -> int:
    """Runs a page of ``size`` bytes may be walked in."""
    return min(MAX_RUNS, size // MIN_RUN + 16)


def _opening(b: memoryview, size: int) -> int | None:
    """Where a snappy stream's literals start, after the length it opens with, when that
    is ``size`` and read as snappy reads it (a varint of at most 5 bytes), else None."""
    try:
        declared, i = varint(b, 0)
    except Unreadable:
        return None
    return i if declared == size and i <= 5 else None


def _snappy(b: memoryview, size: int) -> list[tuple[int, int]] | None:
    """Snappy's literals, when the stream is only literals adding up to ``size``."""
    i = _opening(b, size)
    if i is None:
        return None
    runs: list[tuple[int, int]] = []
    out, limit, end = 0, _limit(size), len(b)
    while i < end:
        tag = b[i]
        if tag & 3 or len(runs) >= limit:  # a copy: the page is not stored as it is
            return None
        n = tag >> 2
        i += 1
        if n >= 60:  # the length's 1-4 bytes follow the tag
            width = n - 59
            if i + width > end:
                return None
            n = int.from_bytes(b[i : i + width], "little")
            i += width
        n += 1
        if i + n > end or out + n > size:
            return None
        runs.append((out, i))
        out, i = out + n, i + n
    return runs if out == size else None


def _literal_header(n: int) -> bytes:
    """The shortest snappy literal tag (and length bytes) of a literal of ``n`` bytes."""
    if n <= 60:
        return bytes([(n - 1) << 2])
    width = ((n - 1).bit_length() + 7) // 8
    return bytes([(59 + width) << 2]) + (n - 1).to_bytes(width, "little")


def _snappy_blocks(b: memoryview, size: int) -> Runs | None:
    """The runs of a stream that is what snappy's compressor writes for incompressible
    bytes: a literal of each 64 KiB block of the input (the last one shorter) with its
    shortest tag. Where the stream's length and its last literal say so, the runs are
    known without a walk; the other literals' headers are checked as the runs are read
    (:class:`Headers`). Anything else gives None (the stream is then walked literal by
    literal, :func:`_snappy`)."""
    i = _opening(b, size)
    blocks = -(-size // SNAPPY_BLOCK)
    if i is None or not blocks or blocks > _limit(size):
        return None
    last = size - (blocks - 1) * SNAPPY_BLOCK
    full, tail = _literal_header(SNAPPY_BLOCK), _literal_header(last)
    step = SNAPPY_BLOCK + len(full)
    at = i + (blocks - 1) * step  # the last literal's header
    if at + len(tail) + last != len(b) or bytes(b[at : at + len(tail)]) != tail:
        return None
    heads = i + np.arange(blocks - 1, dtype=np.int64) * step
    sources = [*(heads + len(full)).tolist(), at + len(tail)]
    starts = [k * SNAPPY_BLOCK for k in range(blocks)] + [size]
    return Runs(b, starts, sources, Headers(b, heads, full))


def _zstd(b: memoryview, size: int) -> list[tuple[int, int]] | None:
    """Zstandard's raw blocks, when the stream is one frame of raw blocks only, without a
    checksum, adding up to ``size``."""
    end = len(b)
    if end < 6 or int.from_bytes(b[0:4], "little") != ZSTD_MAGIC:
        return None
    fhd = b[4]
    if fhd & 0x0C:  # a content checksum, or the reserved bit
        return None
    single = bool(fhd & 0x20)
    i = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
    fcs = (0, 2, 4, 8)[fhd >> 6] or (1 if single else 0)
    if i + fcs > end:
        return None
    # zstd refuses a frame that names a dictionary (none is given it) or needs a window
    # past 2**31 bytes, whatever its blocks hold
    if int.from_bytes(b[5 + (0 if single else 1) : i], "little") or (not single and b[5] >> 3 > 21):
        return None
    if fcs:
        declared = int.from_bytes(b[i : i + fcs], "little") + (256 if fcs == 2 else 0)
        if declared != size:
            return None
    i += fcs
    runs: list[tuple[int, int]] = []
    out, limit, last = 0, _limit(size), False
    while not last:
        if i + 3 > end or len(runs) >= limit:
            return None
        header = int.from_bytes(b[i : i + 3], "little")
        last, kind, n = bool(header & 1), (header >> 1) & 3, header >> 3
        i += 3
        if kind != 0 or i + n > end or out + n > size:  # not a raw block
            return None
        if n:
            runs.append((out, i))
        out, i = out + n, i + n
    return runs if i == end and out == size else None
