"""Verification of MinHash candidates: star edges kept only for pairs whose exact
Jaccard similarity reaches the threshold (documents are ``task << ROW_BITS | row``)."""

from __future__ import annotations

import numpy as np

from shardwise.dedup.candidates import ROW_BITS, Candidates, TaskCache, TaskShingles, split_ids
from shardwise.dedup.components import unique_pairs
from shardwise.dedup.sets import (
    distinct,
    shared_count,
    shingle_sets,
    sorted_rows,
)
from shardwise.ops.dedup import TaskKeys

__all__ = ["ROW_BITS", "TaskCache", "shingle_sets", "split_ids", "verified_stars"]

PAIR_LOOP_FROM = 2048  # shingles of a pair from which it is checked on its own


def exact_similar(
    shingles: TaskShingles | Candidates, a: np.ndarray, b: np.ndarray, threshold: float
) -> np.ndarray:
    """Whether the exact Jaccard similarity of the shingle sets of each pair ``(a[i], b[i])``
    reaches ``threshold``; the documents' shingles are stored as sets (sorted, no repeats:
    :func:`~shardwise.dedup.sets.shingle_sets`).

    Sets whose sizes alone rule the threshold out (Jaccard is at most the smaller size over
    the larger) are not read. Pairs of up to :data:`PAIR_LOOP_FROM` shingles are checked
    many at once: each pair's two sets side by side in a row of a 2-D array, merged by a
    stable sort along the rows (two sorted runs: a linear merge), equal neighbours being
    the shingles they share (rows are filled past their length with the largest value, so
    a row's first ``length`` entries, sorted, are its own). Larger pairs one by one, their
    two sets merged the same way. The full 64-bit shingles are
    compared, nothing is coded."""
    docs = distinct(np.concatenate([a, b]))
    ia, ib = np.searchsorted(docs, a), np.searchsorted(docs, b)
    sizes = shingles.sizes_of(docs)
    la, lb = sizes[ia], sizes[ib]
    inter = np.zeros(len(a), dtype=np.int64)
    maybe = np.minimum(la, lb) >= threshold * np.maximum(la, lb)
    big = maybe & (la + lb > PAIR_LOOP_FROM)
    if big.any():  # one by one, on each document's set where it is (no copy where mapped)
        pairs = np.flatnonzero(big)
        wanted = distinct(np.concatenate([ia[pairs], ib[pairs]]))
        own = dict(zip(wanted.tolist(), shingles.sets_of(docs[wanted])))
        for i, x, y in zip(pairs.tolist(), ia[pairs].tolist(), ib[pairs].tolist()):
            inter[i] = shared_count(own[x], own[y])
    small = maybe & ~big
    if small.any():
        wanted = distinct(np.concatenate([ia[small], ib[small]]))
        sets, starts = shingles.values_of(docs[wanted])
        at = np.full(len(docs), -1, dtype=np.int64)
        at[wanted] = starts
        _intersections(sets, at[ia], la, at[ib], lb, np.flatnonzero(small), inter)
    union = la + lb - inter
    return np.where(union > 0, maybe & (inter / np.maximum(union, 1) >= threshold), True)


def _intersections(
    sets: np.ndarray,
    sa: np.ndarray,
    la: np.ndarray,
    sb: np.ndarray,
    lb: np.ndarray,
    pairs: np.ndarray,
    inter: np.ndarray,
) -> None:
    """``inter[i]`` = the shingles shared by ``sets[sa[i]:sa[i] + la[i]]`` and
    ``sets[sb[i]:sb[i] + lb[i]]``, for every ``i`` in ``pairs``, many pairs at once."""
    for rows, m, n in sorted_rows(
        sets, [(sa[pairs], la[pairs]), (sb[pairs], lb[pairs])], kind="stable"
    ):
        common = (m[:, 1:] == m[:, :-1]) & (np.arange(1, m.shape[1]) < n[:, None])
        inter[pairs[rows]] = common.sum(axis=1)


def verified_stars(
    keys: TaskKeys,
    threshold: float,
    doc: np.ndarray,
    group: np.ndarray,
    active: np.ndarray,
    u_out: list[np.ndarray],
    v_out: list[np.ndarray],
    max_bytes: int = 2**62,
) -> int:
    """Star edges of each bucket to its smallest document, kept only when the pair really
    is similar; members rejected by their root form the next star of the bucket, and so
    on. ``doc`` is sorted within each ``group`` (bucket). Vectorised by rounds; returns the
    number of rejected pairs.

    Every pair is kept only if the exact Jaccard similarity of its shingle sets reaches
    the threshold (:func:`exact_similar`), so no pair under it is ever joined; a pair is
    never taken or left on its signatures' word (the check is a linear merge, or ruled out
    by the sizes alone). The candidates' shingles are gathered once when they fit in
    ``max_bytes`` (:class:`Candidates`); else at most ``max_bytes`` of the tasks' keys
    are kept in memory at a time (:class:`TaskCache`)."""
    gathered = Candidates.gather(keys, distinct(doc[active]), max_bytes)
    shingles: TaskShingles | Candidates = (
        gathered if gathered is not None else TaskShingles(keys, max_bytes)
    )
    rejected = 0
    active = active.copy()
    while True:
        idx = np.flatnonzero(active)
        if len(idx) == 0:
            break
        g = group[idx]
        first = np.ones(len(idx), dtype=bool)
        first[1:] = g[1:] != g[:-1]
        counts = np.bincount(np.cumsum(first) - 1)
        alone = np.repeat(counts == 1, counts)  # a bucket with one member left is done
        root_pos = np.repeat(idx[first], counts)
        member = ~first & ~alone
        u, v = doc[idx[member]], doc[root_pos[member]]
        active[idx[first | alone]] = False
        if len(u) == 0:
            break
        pairs, inverse = unique_pairs(u, v)
        ok_member = exact_similar(shingles, pairs[:, 1], pairs[:, 0], threshold)[inverse.ravel()]
        rejected += int((~ok_member).sum())
        u_out.append(u[ok_member])
        v_out.append(v[ok_member])
        active[idx[member][ok_member]] = (
            False  # joined its root; the rejected stay for the next star
        )
    return rejected
