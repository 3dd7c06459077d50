"""The runs of an RLE / bit-packed hybrid stream found by numpy, not run by run in Python.

Each run opens with a varint header that says how far the next one is, so the runs form
a chain through the stream's bytes. Reading it run by run holds the GIL for every run: a
page of token lists' repetition levels is a few runs a row, several hundred a page, and
their Python loop was a third of such a column's decode, which kept two reader threads
from decoding two row groups at once.

Here every byte is read at once, by numpy, as if a run opened there (its header, where
its payload starts, where the next run would open); the chain from byte 0 is then a walk
over plain lists, a step a few list reads. Bytes that do not open a run in the chain are
read too and ignored.
"""

from __future__ import annotations

import numpy as np

from shardwise.formats.parquet._pages import Unreadable

__all__ = ["MAX_GROUPS", "chain_runs"]

HEADER_BYTES = 5  # headers longer than this (a count past 2**34) are left to the run loop
MAX_GROUPS = ((1 << 31) - 1) // 8  # groups of 8 a packed run holds at most (Arrow's limit)


def chain_runs(b: memoryview, width: int, n: int) -> tuple[np.ndarray, ...] | None:
    """The runs of ``b`` (values ``width`` bits wide) until ``n`` values are covered, as
    arrays: counts (a repeated run cut at ``n``), values (-1: packed), payload starts;
    and the byte after the last run (an array of one). None when a header in the chain
    is longer than :data:`HEADER_BYTES` (the caller reads such a stream run by run).
    Unreadable when the stream ends, or holds an empty run, before ``n`` values."""
    raw = np.frombuffer(b, dtype=np.uint8)
    size = len(raw)
    head, start, long = _headers(raw)
    literal = (head & 1).astype(bool)
    groups = head >> 1
    count = np.where(literal, groups * 8, groups)
    vbytes = (width + 7) // 8
    nxt = start + np.where(literal, groups * width, vbytes)
    # the chain's two ends: ``size`` (the stream ended), ``size + 1`` (a bad run); a header
    # past 32 bits or a packed run past Arrow's limit is one Arrow stops at
    bad = (count == 0) | (nxt > size) | long | (head >> 32 > 0) | (literal & (groups > MAX_GROUPS))
    jump = np.append(np.where(bad, size + 1, nxt), [size, size + 1])
    chain = _chain(jump, np.append(count, [0, 0]), n, size)
    real = chain[chain < size]  # a bad run, if any, is the last of them
    if long[real].any():
        return None
    if len(real) < len(chain) or bad[real].any():
        raise Unreadable("empty or truncated run")
    counts = count[chain]
    before = int(counts[:-1].sum())
    if not literal[chain[-1]]:
        counts[-1] = n - before  # a repeated run is cut where the values wanted end
    values = np.full(len(chain), -1, dtype=np.int64)
    repeated = chain[~literal[chain]]
    values[~literal[chain]] = _repeated_values(raw, start[repeated], vbytes)
    return counts, values, start[chain], nxt[chain[-1:]]


def _headers(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For every byte, the varint starting there, where it ends (past the stream's end
    for one cut by it), and whether it is longer than :data:`HEADER_BYTES`."""
    size = len(raw)
    pad = np.zeros(size + HEADER_BYTES, dtype=np.int64)
    pad[:size] = raw
    going = pad >= 0x80
    head = pad[:size] & 0x7F
    length = np.ones(size, dtype=np.int64)
    on = going[:size].copy()  # whether the varint at each byte goes on past byte k
    for k in range(1, HEADER_BYTES):
        head |= np.where(on, (pad[k : size + k] & 0x7F) << (7 * k), 0)
        length += on
        on &= going[k : size + k]
    end = np.arange(size, dtype=np.int64) + length
    return head, end, on


def _chain(jump: np.ndarray, count: np.ndarray, n: int, size: int) -> np.ndarray:
    """The chain of runs from byte 0, as far as the run covering the ``n``-th value or
    the first end reached (``jump``: each byte's next run). A walk over plain lists: a
    step is a few list reads, where reading a run's header was a few dozen bytecodes."""
    step, counts = jump.tolist(), count.tolist()
    chain, got, i = [], 0, 0
    while got < n and i < size:
        chain.append(i)
        got += counts[i]
        i = step[i]
    if got < n:
        chain.append(i)  # an end: the stream ended, or a bad run
    return np.asarray(chain, dtype=np.int64)


def _repeated_values(raw: np.ndarray, at: np.ndarray, vbytes: int) -> np.ndarray:
    """The little-endian values of ``vbytes`` bytes at ``at`` (repeated runs' values)."""
    pad = np.zeros(len(raw) + vbytes, dtype=np.int64)
    pad[: len(raw)] = raw
    out = np.zeros(len(at), dtype=np.int64)
    for k in range(vbytes):
        out |= pad[at + k] << (8 * k)
    return out
