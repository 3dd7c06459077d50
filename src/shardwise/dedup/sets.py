"""Shingle sets as sorted arrays: building them for many documents at once, and counting
what two of them share (the exact Jaccard check of verification).

A document's set is its shingle hashes sorted without repeats. Documents of more than
:data:`LOOP_FROM` shingles are sorted one by one in place (a sort of a few hundred or
thousand values that stay in cache costs a few nanoseconds each, and the call's overhead
is small next to it); shorter ones side by side in rows of a 2-D array sorted along its
rows, many at once, where one call per document would cost more than its sort.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

__all__ = [
    "LOOP_FROM",
    "PAIR_SHINGLES",
    "distinct",
    "ranges",
    "shared_count",
    "shingle_sets",
    "sorted_rows",
    "take_ranges",
]

LOOP_FROM = 64  # shingles from which a document (or a pair) is handled on its own
PAIR_SHINGLES = 1 << 21  # entries of the 2-D arrays sorted at once (~16 MB)
MERGE_FROM = 256  # row width from which a "stable" row sort (a merge of sorted runs) is kept
_PAD = np.uint64(0xFFFFFFFFFFFFFFFF)
_TOP = np.uint64(48)  # the top 16 bits of a shingle: the first pass of a document's sort


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values of ``values`` (``np.unique(values)``), by a sort and a
    mask: the first plain call of ``np.unique`` imports ``numpy.ma`` (~20 ms in every
    fresh worker process)."""
    s = np.sort(np.asarray(values).ravel())
    keep = np.ones(len(s), dtype=bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


def ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + lengths[i] - 1`` of every ``i``, concatenated."""
    lengths = np.asarray(lengths, dtype=np.int64)
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(np.asarray(starts, np.int64) - first, lengths) + np.arange(int(lengths.sum()))


def take_ranges(
    values: np.ndarray, starts: np.ndarray, lengths: np.ndarray, out: np.ndarray | None = None
) -> np.ndarray:
    """``values[starts[i]:starts[i] + lengths[i]]`` of every ``i``, concatenated (into
    ``out`` when given, of the total length): by slices when the ranges are long (no index
    array as long as the result), else by one index."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    if out is None:
        out = np.empty(total, dtype=values.dtype)
    if total and total >= LOOP_FROM * len(lengths):
        np.concatenate(
            [values[s : s + n] for s, n in zip(np.asarray(starts).tolist(), lengths.tolist())],
            out=out,
        )
    elif total:
        np.take(values, ranges(starts, lengths), out=out)
    return out


def shingle_sets(shingles: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each document's shingles ``shingles[offsets[i]:offsets[i + 1]]`` as a set, sorted
    without repeats: ``(sets, lengths)``, the documents in order (what verification
    stores, once per document, so that its pair check only merges)."""
    offsets = np.asarray(offsets, dtype=np.int64)
    lengths = np.diff(offsets)
    s = np.array(shingles, dtype=np.uint64)  # a copy, sorted in place document by document
    big = np.flatnonzero(lengths > LOOP_FROM)
    by_top = _top_bits_first()
    for a, b in zip(offsets[big].tolist(), offsets[big + 1].tolist()):
        if by_top:
            s[a:b] = s[a:b][np.argsort((s[a:b] >> _TOP).astype(np.uint16), kind="stable")]
            s[a:b].sort(kind="stable")  # runs of equal top bits: a merge of short runs
        else:
            s[a:b].sort()
    small = np.flatnonzero((lengths > 1) & (lengths <= LOOP_FROM))
    for rows, m, n in sorted_rows(s, [(offsets[small], lengths[small])]):
        s[ranges(offsets[small[rows]], n)] = m[np.arange(m.shape[1]) < n[:, None]]
    keep = np.ones(len(s), dtype=bool)
    keep[1:] = s[1:] != s[:-1]
    keep[offsets[:-1][lengths > 0]] = True  # a document's first shingle is always its own
    kept = np.concatenate([[0], np.cumsum(keep)])
    return s[keep], (kept[offsets[1:]] - kept[offsets[:-1]]).astype(np.int64)


@functools.cache
def _top_bits_first() -> bool:
    """Whether a document's set is sorted faster here by its top 16 bits first (a radix
    sort), then by a stable sort of the nearly sorted result, than by ``np.sort``.

    Random hashes of one document come out of the first pass in runs that the second
    merges in about linear time. Where numpy's sort of 64-bit values uses AVX-512
    compress-stores, microcoded on AMD Zen 4 (a known numpy issue), this takes ~30 instead
    of ~110 us for 5,000 values; where that path is fast, ``np.sort`` wins. Measured once
    per process on 4,096 random values (about a millisecond); either way the sets are the
    same."""
    with np.errstate(over="ignore"):  # random-looking values (numpy.random costs ~10 ms to import)
        x = np.arange(1, 4097, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        x ^= x >> np.uint64(29)
        x *= np.uint64(0xBF58476D1CE4E5B9)
        x ^= x >> np.uint64(32)

    def two_pass() -> None:
        y = x[np.argsort((x >> _TOP).astype(np.uint16), kind="stable")]
        y.sort(kind="stable")

    plain, top = float("inf"), float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        np.sort(x)
        t1 = time.perf_counter()
        two_pass()
        plain, top = min(plain, t1 - t0), min(top, time.perf_counter() - t1)
    return top < 0.8 * plain


def sorted_rows(
    vals: np.ndarray,
    sides: Sequence[tuple[np.ndarray, np.ndarray]],
    kind: Literal["quicksort", "stable"] = "quicksort",
) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(rows, m, n)`` over chunks of about ``PAIR_SHINGLES`` entries: row ``i`` of ``m``
    holds, sorted (by ``kind``: ``stable`` merges sorted ranges in linear time), the
    ranges ``vals[s:s + length]`` of every ``(s, length)`` in ``sides`` at ``rows[i]``
    (``n[i]`` entries, then the largest value). Rows go in length order, so the rows of
    one chunk are about as long and little of ``m`` is filler."""
    total = sum(
        (np.asarray(length, np.int64) for _, length in sides), np.zeros(len(sides[0][1]), np.int64)
    )
    order = np.argsort(total, kind="stable")
    lo = 0
    while lo < len(order):
        widths = np.maximum(total[order[lo : lo + PAIR_SHINGLES]], 1)
        hi = lo + max(
            1,
            int(
                np.searchsorted(widths * np.arange(1, len(widths) + 1), PAIR_SHINGLES, side="right")
            ),
        )
        rows, n = order[lo:hi], total[order[lo:hi]]
        m = np.full((len(rows), max(1, int(n.max()))), _PAD, dtype=np.uint64)
        col = np.arange(m.shape[1])
        before = np.zeros(len(rows), dtype=np.int64)
        for s, length in sides:
            part = np.asarray(length, np.int64)[rows]
            m[(col >= before[:, None]) & (col < (before + part)[:, None])] = vals[
                ranges(np.asarray(s)[rows], part)
            ]
            before += part
        # equal values are alike, so any sort gives the same rows: on rows of up to
        # MERGE_FROM entries numpy's quicksort beats the merge of the two runs 2-4x
        m.sort(axis=1, kind=kind if m.shape[1] > MERGE_FROM else "quicksort")
        yield rows, m, n
        lo = hi


def shared_count(a: np.ndarray, b: np.ndarray) -> int:
    """How many values two sorted unique arrays share: the two runs merged by a stable sort
    (which finds the runs and merges them in linear time; 6,000 shingles a side in about
    17 us, where looking each value up in the other array took 78 us), then equal
    neighbours counted."""
    if len(a) == 0 or len(b) == 0:
        return 0
    merged = np.concatenate([a, b])
    merged.sort(kind="stable")
    return int(np.count_nonzero(merged[1:] == merged[:-1]))
