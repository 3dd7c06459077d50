"""Verification of MinHash candidates: star edges kept only for pairs whose exact
Jaccard similarity reaches the threshold (documents are ``task << ROW_BITS | row``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

from shardwise.dedup.components import unique_pairs
from shardwise.ops.dedup import TaskKeys

__all__ = ["ROW_BITS", "TaskCache", "shingle_sets", "verified_stars"]

ROW_BITS = 32


class TaskCache:
    """Tasks' key arrays, least recently used first out once they pass ``max_bytes``.

    A verifying edges task meets candidates from every task; keeping every task's arrays
    would grow with the corpus, so at most ``max_bytes`` of them stay (always the last one
    loaded, however large) and the rest are read again from the task's key file."""

    def __init__(self, keys: TaskKeys, names: Sequence[str], max_bytes: int) -> None:
        self.keys, self.names, self.max_bytes = keys, list(names), max_bytes
        self.items: OrderedDict[int, dict[str, np.ndarray]] = OrderedDict()
        self.bytes = 0
        self.loads = 0

    def get(self, task: int, names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
        """Task ``task``'s arrays (at least ``names``, default all; the others are read
        when first asked for)."""
        found = self.items.get(task)
        if found is None:
            found = self.items[task] = {}
        self.items.move_to_end(task)
        missing = [n for n in (self.names if names is None else names) if n not in found]
        if missing:
            new = self.keys.load(task, missing)
            if "lengths" in new:  # where each document's shingles start
                new["offsets"] = np.concatenate([[0], np.cumsum(new["lengths"])])
            self.loads += 1
            found.update(new)
            self.bytes += sum(a.nbytes for a in new.values())
        while self.bytes > self.max_bytes and len(self.items) > 1:
            _, old = self.items.popitem(last=False)
            self.bytes -= sum(a.nbytes for a in old.values())
        return found


class _Shingles:
    """Random access to the signatures and shingle sets of documents within a memory cap."""

    def __init__(self, keys: TaskKeys, max_bytes: int) -> None:
        self.tasks = TaskCache(keys, ["sig", "shingles", "lengths"], max_bytes)

    def sig_rows(self, docs: np.ndarray) -> np.ndarray:
        """The signatures of ``docs`` (one row each)."""
        task = (docs >> np.uint64(ROW_BITS)).astype(np.int64)
        row = (docs & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)
        out: np.ndarray | None = None
        for t in np.unique(task):
            sig = self.tasks.get(int(t), ["sig"])["sig"]
            if out is None:
                out = np.empty((len(docs), sig.shape[1]), dtype=sig.dtype)
            m = task == t
            out[m] = sig[row[m]]
        return out if out is not None else np.zeros((0, 0), np.uint64)

    def values_of(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The shingle sets of the sorted unique ``docs`` as stored:
        ``(values, starts, sizes)``, document ``i``'s at ``values[starts[i]:starts[i] + sizes[i]]``."""
        task = (docs >> np.uint64(ROW_BITS)).astype(np.int64)
        row = (docs & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)
        vals: list[np.ndarray] = []
        sizes = np.zeros(len(docs), dtype=np.int64)
        for t in np.unique(task):  # docs are sorted, so by task and then by row
            d = self.tasks.get(int(t), ["shingles", "lengths"])
            idx = np.flatnonzero(task == t)
            lo, n = d["offsets"][row[idx]], d["lengths"][row[idx]]
            vals.append(d["shingles"][_ranges(lo, n)])
            sizes[idx] = n
        v = np.concatenate(vals) if vals else np.zeros(0, np.uint64)
        return v, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64), sizes


class _Candidates:
    """The signatures and shingles of a fixed set of documents (sorted unique ``docs``),
    gathered in one pass over the tasks, each task's keys read once: what a verifying edges
    task needs when its candidates fit in its share of the memory budget (a cache of whole
    tasks would read every task again in every round once they do not all fit)."""

    def __init__(self, docs: np.ndarray, sig: np.ndarray, values: np.ndarray, sizes: np.ndarray) -> None:
        self.docs, self.sig, self.values, self.sizes = docs, sig, values, sizes
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    @classmethod
    def gather(cls, keys: TaskKeys, docs: np.ndarray, max_bytes: int) -> _Candidates | None:
        """The rows of ``docs``, or None once they pass ``max_bytes``."""
        task = (docs >> np.uint64(ROW_BITS)).astype(np.int64)
        row = (docs & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)
        sigs: list[np.ndarray] = []
        vals: list[np.ndarray] = []
        sizes: list[np.ndarray] = []
        used = 0
        for t in np.unique(task):  # docs are sorted, so by task and then by row
            d = keys.load(int(t), ["sig", "shingles", "lengths"])
            r = row[task == t]
            starts = np.concatenate([[0], np.cumsum(d["lengths"])])[r]
            n = d["lengths"][r].astype(np.int64)
            sigs.append(d["sig"][r])
            vals.append(d["shingles"][_ranges(starts, n)])
            sizes.append(n)
            used += sigs[-1].nbytes + vals[-1].nbytes + n.nbytes
            if used > max_bytes:
                return None
        if not sigs:
            return cls(docs, np.zeros((0, 0), np.uint64), np.zeros(0, np.uint64), np.zeros(0, np.int64))
        return cls(docs, np.concatenate(sigs), np.concatenate(vals), np.concatenate(sizes))

    def sig_rows(self, docs: np.ndarray) -> np.ndarray:
        """The signatures of ``docs`` (one row each; all among the gathered ones)."""
        return self.sig[np.searchsorted(self.docs, docs)]

    def values_of(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As :meth:`_Shingles.values_of`, for sorted unique ``docs`` among the gathered ones."""
        i = np.searchsorted(self.docs, docs)
        sizes = self.sizes[i]
        return (self.values[_ranges(self.starts[i], sizes)], np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64),
                sizes)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The positions ``starts[i] .. starts[i] + lengths[i] - 1`` of every ``i``, concatenated."""
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    first = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(np.asarray(starts, np.int64) - first, lengths) + np.arange(total)


PAIR_SHINGLES = 1 << 21  # shingles sorted at once by the exact check (rows of a 2-D array, ~16 MB)
_PAD = np.uint64(0xFFFFFFFFFFFFFFFF)


def exact_similar(shingles: _Shingles | _Candidates, a: np.ndarray, b: np.ndarray, threshold: float) -> np.ndarray:
    """Whether the exact Jaccard similarity of the shingle sets of each pair ``(a[i], b[i])``
    reaches ``threshold``; the documents' shingles are stored as sets (sorted, no repeats:
    :func:`shingle_sets`).

    Each pair's two sets, side by side in a row of a 2-D array (many pairs of about the
    same size at once), are merged by a stable sort along the rows (two sorted runs: a
    linear merge), and equal neighbours are the shingles they share. Rows are filled past
    their length with the largest value, so a row's first ``length`` entries, sorted, are
    its own (a tie with a shingle of that value is the same value): the full 64-bit
    shingles are compared, nothing is coded.
    """
    docs = np.unique(np.concatenate([a, b]))
    sets, starts, sizes = shingles.values_of(docs)
    ia, ib = np.searchsorted(docs, a), np.searchsorted(docs, b)
    la, lb = sizes[ia], sizes[ib]
    inter = np.zeros(len(a), dtype=np.int64)
    for rows, m, n in _sorted_rows(sets, [(starts[ia], la), (starts[ib], lb)], kind="stable"):
        common = (m[:, 1:] == m[:, :-1]) & (np.arange(1, m.shape[1]) < n[:, None])
        inter[rows] = common.sum(axis=1)
    union = la + lb - inter
    return np.where(union > 0, inter / np.maximum(union, 1) >= threshold, True)


def shingle_sets(shingles: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each document's shingles ``shingles[offsets[i]:offsets[i + 1]]`` as a set, sorted
    without repeats: ``(sets, lengths)``, the documents in order (what verification
    stores, once per document, so that its pair check only merges)."""
    starts = np.asarray(offsets[:-1], np.int64)
    sets, set_starts, set_sizes = _unique_sets(shingles, starts, np.diff(offsets).astype(np.int64))
    return sets[_ranges(set_starts, set_sizes)], set_sizes


def _unique_sets(vals: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each segment ``vals[starts[i]:starts[i] + sizes[i]]`` sorted without repeats:
    ``(sets, set_starts, set_sizes)`` (the segments in any order in ``sets``)."""
    out: list[np.ndarray] = []
    set_starts = np.zeros(len(sizes), dtype=np.int64)
    set_sizes = np.zeros(len(sizes), dtype=np.int64)
    at = 0
    for rows, m, n in _sorted_rows(vals, [(starts, sizes)]):
        keep = np.arange(m.shape[1]) < n[:, None]
        keep[:, 1:] &= m[:, 1:] != m[:, :-1]
        counts = keep.sum(axis=1)
        set_sizes[rows] = counts
        set_starts[rows] = at + np.concatenate([[0], np.cumsum(counts)[:-1]])
        out.append(m[keep])
        at += int(counts.sum())
    return (np.concatenate(out) if out else np.zeros(0, np.uint64)), set_starts, set_sizes


def _sorted_rows(vals: np.ndarray, sides: Sequence[tuple[np.ndarray, np.ndarray]],
                 kind: Literal["quicksort", "stable"] = "quicksort") -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """``(rows, m, n)`` over chunks of about ``PAIR_SHINGLES`` entries: row ``i`` of ``m``
    holds, sorted (by ``kind``: ``stable`` merges sorted ranges in linear time), the
    ranges ``vals[s:s + length]`` of every ``(s, length)`` in ``sides`` at ``rows[i]``
    (``n[i]`` entries, then the largest value). Rows go in length order, so the rows of
    one chunk are about as long and little of ``m`` is filler."""
    total = sum((np.asarray(length, np.int64) for _, length in sides), np.zeros(len(sides[0][1]), np.int64))
    order = np.argsort(total, kind="stable")
    lo = 0
    while lo < len(order):
        widths = np.maximum(total[order[lo : lo + PAIR_SHINGLES]], 1)
        hi = lo + max(1, int(np.searchsorted(widths * np.arange(1, len(widths) + 1), PAIR_SHINGLES, side="right")))
        rows, n = order[lo:hi], total[order[lo:hi]]
        m = np.full((len(rows), max(1, int(n.max()))), _PAD, dtype=np.uint64)
        col = np.arange(m.shape[1])
        before = np.zeros(len(rows), dtype=np.int64)
        for s, length in sides:
            part = np.asarray(length, np.int64)[rows]
            m[(col >= before[:, None]) & (col < (before + part)[:, None])] = vals[_ranges(np.asarray(s)[rows], part)]
            before += part
        m.sort(axis=1, kind=kind)
        yield rows, m, n
        lo = hi


def verified_stars(keys: TaskKeys, threshold: float, num_perm: int, doc: np.ndarray, group: np.ndarray,
                   active: np.ndarray, u_out: list[np.ndarray], v_out: list[np.ndarray],
                   max_bytes: int = 2**62) -> int:
    """Star edges of each bucket to its smallest document, kept only when the pair really
    is similar; members rejected by their root form the next star of the bucket, and so
    on. ``doc`` is sorted within each ``group`` (bucket). Vectorised by rounds; returns the
    number of rejected pairs.

    A pair estimated (from the signatures) more than 4.5 standard deviations below the
    threshold is rejected, and one estimated as far above it accepted, without the exact
    Jaccard check that decides the rest (:func:`exact_similar`, vectorised). The
    candidates' signatures and shingles are gathered once when they fit in ``max_bytes``
    (:class:`_Candidates`); else at most ``max_bytes`` of the tasks' keys are kept in
    memory at a time (:class:`TaskCache`)."""
    gathered = _Candidates.gather(keys, np.unique(doc[active]), max_bytes)
    shingles: _Shingles | _Candidates = gathered if gathered is not None else _Shingles(keys, max_bytes)
    sigma = float(np.sqrt(threshold * (1 - threshold) / num_perm))
    floor, ceiling = threshold - 4.5 * sigma, threshold + 4.5 * sigma
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
        est = (shingles.sig_rows(pairs[:, 0]) == shingles.sig_rows(pairs[:, 1])).mean(axis=1)
        ok = est >= ceiling
        unsure = np.flatnonzero((est >= floor) & ~ok)
        ok[unsure] = exact_similar(shingles, pairs[unsure, 1], pairs[unsure, 0], threshold)
        ok_member = ok[inverse.ravel()]
        rejected += int((~ok_member).sum())
        u_out.append(u[ok_member])
        v_out.append(v[ok_member])
        active[idx[member][ok_member]] = False  # joined its root; the rejected stay for the next star
    return rejected
