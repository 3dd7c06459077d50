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
import pyarrow as pa

from shardwise.formats.parquet._pages import Unreadable, varint
from shardwise.formats.parquet._runchain import MAX_GROUPS, chain_runs

__all__ = ["check_constant", "check_rows", "decode", "row_starts"]

MAX_RUNS = 1 << 14  # runs read one by one before giving up (the caller falls back to Arrow)
PERIOD_TRIES = 64  # row ends at which check_rows looks for the stream repeating
Runs = tuple[
    list[int], list[int], list[int], int
]  # counts, values (-1: literal), payload starts, end


def _run(b: memoryview, width: int, i: int, room: int) -> tuple[int, int, int, int]:
    """The run at ``i``: its count, value (-1: packed), payload start and end. A repeated
    run claiming more than ``room`` values is cut there (the values past it are never
    needed, and a few bytes may claim billions)."""
    head, i = _header(b, i)
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


def _header(b: memoryview, i: int) -> tuple[int, int]:
    """The run header at ``i`` and where it ends, as Arrow reads one: a varint of at most
    5 bytes and 32 bits, a packed run of at most :data:`MAX_GROUPS` groups. Arrow stops
    at any other (and reports the page), so Unreadable."""
    head, end = varint(b, i)
    if end - i > 5 or head >> 32 or (head & 1 and head >> 1 > MAX_GROUPS):
        raise Unreadable(f"a run header of {end - i} bytes saying {head}")
    return head, end


def _runs(b: memoryview, width: int, n: int, i: int = 0) -> Runs:
    """The runs from ``i`` until ``n`` values are covered (a packed run may pass ``n``
    in the last run). Encoders cut long packed stretches into runs of one size, so after
    a packed run the runs of the same one-byte header at the same stride are taken at
    once (:func:`_same_runs`)."""
    counts: list[int] = []
    values: list[int] = []
    starts: list[int] = []
    got, size, vbytes = 0, len(b), (width + 7) // 8
    while got < n:  # _run, inlined: level streams are often runs of a few values each
        if len(counts) >= MAX_RUNS or i >= size:
            raise Unreadable("too many runs, or a truncated one")
        head = b[i]
        if head & 0x80:
            head, i = _header(b, i)
        else:
            i += 1
        start = i
        if head & 1:
            count, value = (head >> 1) * 8, -1
            i += (head >> 1) * width
            if not width:  # values of no bits take no bytes: no more than those still wanted
                count = min(count, (n - got + 7) // 8 * 8)
        else:
            count = min(head >> 1, n - got)
            value = (
                b[i] if vbytes == 1 and i < size else int.from_bytes(b[i : i + vbytes], "little")
            )
            i += vbytes
        if count == 0 or i > size:
            raise Unreadable("empty or truncated run")
        counts.append(count)
        values.append(value)
        starts.append(start)
        got += count
        if value < 0 and head < 0x80 and got + count <= n and i < size and b[i] == head:
            more = _same_runs(b, i, head, 1 + (head >> 1) * width, (n - got) // count)
            counts.extend([count] * more)
            values.extend([-1] * more)
            starts.extend(range(i + 1, i + more * (i - start + 1), i - start + 1))
            got, i = got + more * count, i + more * (i - start + 1)
    return counts, values, starts, i


def _same_runs(b: memoryview, i: int, head: int, stride: int, most: int) -> int:
    """How many whole runs from ``i`` on (at most ``most``) open with the header byte
    ``head``, each ``stride`` bytes long."""
    if most < 1 or stride < 2:
        return 0
    raw = np.frombuffer(b, dtype=np.uint8)
    fits = min(most, (len(b) - i) // stride)  # runs whose bytes all lie in ``b``
    heads = raw[i : i + fits * stride : stride]
    differ = np.flatnonzero(heads != head)
    return int(differ[0]) if len(differ) else len(heads)


def _unpack(data: np.ndarray, width: int, count: int) -> np.ndarray:
    """``count`` values of ``width`` bits packed in ``data`` (uint8, whole groups of 8
    values), as uint32 (8, 16 or 32 bits: a view, as wide as the values). Value ``p`` of
    every group starts at the same bit of the group's ``width`` bytes, so each of the 8 is
    one strided 64-bit read, shift and mask."""
    groups = -(-count // 8)
    if width in (8, 16, 32) and len(data) >= groups * width:  # whole bytes: one view
        return data[: groups * width].view(f"<u{width // 8}")[:count]  # unsigned, as wide
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


def _payloads(raw: np.ndarray, starts: list[int], sizes: list[int]) -> np.ndarray:
    """The packed runs' bytes put together. Runs of one size one header byte apart (an
    encoder's long packed stretch) are copied as one strided block."""
    k, size = len(starts) - 1, sizes[0]
    # each run is at least its size and a header byte from the next: the first k of one
    # size spanning exactly k - 1 such steps are evenly spaced
    if k < 2 or starts[k - 1] - starts[0] != (k - 1) * (size + 1) or sizes[:k].count(size) != k:
        return np.concatenate([raw[s : s + z] for s, z in zip(starts, sizes)])
    out = np.frombuffer(pa.allocate_buffer(k * size + sizes[k]), dtype=np.uint8)  # Arrow's pool
    block = np.lib.stride_tricks.as_strided(
        raw[starts[0] :], shape=(k, size), strides=(size + 1, 1), writeable=False
    )
    out[: k * size].reshape(k, size)[:] = block
    out[k * size :] = raw[starts[k] : starts[k] + sizes[k]]
    return out


def _values(b: memoryview, width: int, runs: Runs, n: int) -> np.ndarray:
    counts, values, starts, _ = runs
    literal = [v < 0 for v in values]
    raw = np.frombuffer(b, dtype=np.uint8)
    if all(literal):  # dictionary indices, often: one unpack, nothing to merge
        return _unpack(_payloads(raw, starts, [c // 8 * width for c in counts]), width, n)
    packed = [raw[s : s + c // 8 * width] for s, c, lit in zip(starts, counts, literal) if lit]
    out = np.repeat(np.asarray(values, dtype=np.int64).clip(0), counts).astype(np.uint32)
    if packed:
        mask = np.repeat(np.asarray(literal), counts)
        out[mask] = _unpack(np.concatenate(packed), width, int(mask.sum()))
    if width < 32 and len(out) and int(out.max()) >> width:
        raise Unreadable("a repeated value wider than the bit width")
    return out[:n]


def decode(b: memoryview, width: int, n: int) -> np.ndarray:
    """The first ``n`` values of the stream ``b`` (unsigned integers, see :func:`_unpack`)."""
    if not 0 <= width <= 32:
        raise Unreadable(f"bit width {width}")
    if n == 0:
        return np.zeros(0, dtype=np.uint32)
    return _values(b, width, _runs(b, width, n), n)


def check_constant(b: memoryview, width: int, n: int, value: int) -> bool:
    """Whether the first ``n`` values of ``b`` all equal ``value`` (read as runs: levels
    without nulls are usually a few repeated runs, compared without being expanded)."""
    if n == 0:
        return True
    if not 0 <= width <= 32:
        raise Unreadable(f"bit width {width}")
    runs = _runs(b, width, n)
    if all(v >= 0 for v in runs[1]):
        return all(v == value for v in runs[1])
    return bool((_values(b, width, runs, n) == value).all())


def row_starts(b: memoryview, n: int) -> np.ndarray:
    """Where the rows start among the first ``n`` repetition levels of ``b`` (bit width 1,
    a list nested once): the positions of its zeros, as int64. Long lists make the stream
    a few runs a row: the runs are found by numpy (:func:`~shardwise.formats.parquet.
    _runchain.chain_runs`), and only the packed ones are unpacked."""
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    found = chain_runs(b, 1, n) if len(b) else None
    if found is None:
        counts, values, starts, _ = _runs(b, 1, n)
        found = (np.asarray(counts), np.asarray(values), np.asarray(starts), np.zeros(1))
    count, kinds, first = (a.astype(np.int64) for a in found[:3])
    if (kinds > 1).any():
        raise Unreadable("a repetition level over 1 in a list nested once")
    at = np.cumsum(count) - count  # each run's first position
    literal, zeros = kinds < 0, kinds == 0
    out = [_repeated_positions(at[zeros], count[zeros])]
    if literal.any():
        raw = np.frombuffer(b, dtype=np.uint8)
        payload = raw[_repeated_positions(first[literal], count[literal] // 8)]
        bits = np.unpackbits(payload, bitorder="little")
        out.append(_repeated_positions(at[literal], count[literal])[bits == 0])
    rows = np.sort(np.concatenate(out))
    return rows[rows < n]


def _repeated_positions(first: np.ndarray, count: np.ndarray) -> np.ndarray:
    """Every position of the runs starting at ``first``, ``count`` long, in order."""
    total = int(count.sum())
    steps = np.ones(total, dtype=np.int64)
    if total:
        ends = np.cumsum(count)[:-1]
        steps[0] = first[0]
        steps[ends] = first[1:] - (first[:-1] + count[:-1] - 1)
    return np.cumsum(steps)


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
