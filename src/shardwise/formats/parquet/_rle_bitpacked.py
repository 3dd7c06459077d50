"""Parquet's RLE / bit-packed hybrid encoding (levels and dictionary indices), decoded with numpy.

A stream is a sequence of runs, each opened by a varint: an even header ``2n`` is a run
of ``n`` copies of one value (stored in ``ceil(width / 8)`` bytes), an odd header
``2g + 1`` is ``8g`` values packed ``width`` bits each, least significant bit first.
The run headers are read in Python; the packed values of all literal runs are unpacked
in one vectorised step (groups of 8 values fill whole bytes, so the payloads of several
runs put together stay aligned).

Repetition levels of fixed-size lists repeat one short pattern of runs per row, so
:func:`check_rows` reads the runs of the first rows, then compares the rest of the
stream with that prefix repeated as bytes, instead of reading every run.
"""

from __future__ import annotations

import numpy as np

from shardwise.formats.parquet._pages import Unreadable, varint

__all__ = ["check_constant", "check_rows", "decode"]

MAX_RUNS = 1 << 14  # runs read one by one before giving up (the caller falls back to Arrow)
PERIOD_TRIES = 64  # row ends at which check_rows looks for the stream repeating
Runs = tuple[
    list[int], list[int], list[int], int
]  # counts, values (-1: literal), payload starts, end


def _run(b: memoryview, width: int, i: int, room: int) -> tuple[int, int, int, int]:
    """The run at ``i``: its count, value (-1: packed), payload start and end. A repeated
    run claiming more than ``room`` values is cut there (the values past it are never
    needed, and a few bytes may claim billions)."""
    head, i = varint(b, i)
    if head & 1:
        count, start, value = (head >> 1) * 8, i, -1
        i += (head >> 1) * width
    else:
        count, start = min(head >> 1, room), i
        value = int.from_bytes(b[i : i + (width + 7) // 8], "little")
        i += (width + 7) // 8
    if count == 0 or i > len(b):
        raise Unreadable("empty or truncated run")
    return count, value, start, i


def _runs(b: memoryview, width: int, n: int, i: int = 0) -> Runs:
    """The runs from ``i`` until ``n`` values are covered (a packed run may pass ``n``
    in the last run)."""
    counts: list[int] = []
    values: list[int] = []
    starts: list[int] = []
    got = 0
    while got < n:
        if len(counts) >= MAX_RUNS:
            raise Unreadable("too many runs")
        count, value, start, i = _run(b, width, i, n - got)
        counts.append(count)
        values.append(value)
        starts.append(start)
        got += count
    return counts, values, starts, i


def _unpack(data: np.ndarray, width: int, count: int) -> np.ndarray:
    """``count`` values of ``width`` bits packed in ``data`` (uint8, whole groups of 8
    values), as uint32. Value ``p`` of every group starts at the same bit of the group's
    ``width`` bytes, so each of the 8 is one strided 64-bit read, shift and mask."""
    groups = -(-count // 8)
    out = np.zeros(groups * 8, dtype=np.uint32)
    if width == 0 or not groups:
        return out[:count]
    padded = np.zeros(groups * width + 8, dtype=np.uint8)
    padded[: min(len(data), groups * width)] = data[: groups * width]
    mask = np.uint64((1 << width) - 1)
    for p in range(8):
        first, shift = divmod(p * width, 8)
        words = np.ndarray((groups,), dtype="<u8", buffer=padded, offset=first, strides=(width,))
        out[p::8] = (words >> np.uint64(shift)) & mask
    return out[:count]


def _values(b: memoryview, width: int, runs: Runs, n: int) -> np.ndarray:
    counts, values, starts, _ = runs
    literal = [v < 0 for v in values]
    raw = np.frombuffer(b, dtype=np.uint8)
    packed = [raw[s : s + c // 8 * width] for s, c, lit in zip(starts, counts, literal) if lit]
    if all(literal):  # dictionary indices, often: one unpack, nothing to merge
        return _unpack(np.concatenate(packed), width, n)
    out = np.repeat(np.asarray(values, dtype=np.int64).clip(0), counts).astype(np.uint32)
    if packed:
        mask = np.repeat(np.asarray(literal), counts)
        out[mask] = _unpack(np.concatenate(packed), width, int(mask.sum()))
    if width < 32 and len(out) and int(out.max()) >> width:
        raise Unreadable("a repeated value wider than the bit width")
    return out[:n]


def decode(b: memoryview, width: int, n: int) -> np.ndarray:
    """The first ``n`` values of the stream ``b`` (uint32)."""
    if not 0 <= width <= 32:
        raise Unreadable(f"bit width {width}")
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    return _values(b, width, _runs(b, width, n), n)


def check_constant(b: memoryview, width: int, n: int, value: int) -> bool:
    """Whether the first ``n`` values of ``b`` all equal ``value``."""
    return n == 0 or bool((decode(b, width, n) == value).all())


def _expected(start: int, count: int, k: int) -> np.ndarray:
    """Repetition levels of whole fixed-size lists of ``k``: 0 opens a row, 1 continues it."""
    return (np.arange(start, start + count) % k != 0).astype(np.uint32)


def check_rows(b: memoryview, n: int, k: int) -> bool:
    """Whether ``b`` (bit width 1) holds the repetition levels of ``n // k`` whole lists
    of ``k`` values each (``n`` a multiple of ``k``). Its runs are read one by one; at
    each of the first row ends that is also a run's end, if the stream goes on as the
    bytes read so far repeated, the repeats are compared as bytes instead of read."""
    got = i = runs = 0
    tries = PERIOD_TRIES
    while got < n:
        runs += 1
        if runs > MAX_RUNS or i >= len(b):
            return False
        count, value, start, end = _run(b, 1, i, n - got)
        take = min(count, n - got)
        if not np.array_equal(
            _values(b, 1, ([count], [value], [start], end), take), _expected(got, take, k)
        ):
            return False
        got, i = got + count, end
        if tries and got % k == 0 and got < n:
            tries -= 1
            reps = min(len(b) // i, n // got)
            if reps > 1 and b[i : 2 * i] == b[:i] and bytes(b[: reps * i]) == bytes(b[:i]) * reps:
                got, i, tries = reps * got, reps * i, 0
    return True
