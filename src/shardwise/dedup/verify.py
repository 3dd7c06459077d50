"""Verification of MinHash candidates: star edges kept only for pairs whose exact
Jaccard similarity reaches the threshold (documents are ``task << ROW_BITS | row``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from shardwise.ops.dedup import TaskKeys

__all__ = ["ROW_BITS", "TaskCache", "verified_stars"]

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
        """The shingles of the sorted unique ``docs`` as stored (any order, repeats kept):
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


PAIR_SHINGLES = 4_000_000  # shingles gathered at once by the exact check (~32 MB of keys)


def _codes(values: np.ndarray, bits: int) -> np.ndarray:
    """Codes of ``bits`` bits for ``values``: equal values get equal codes, distinct
    ones distinct codes. The top ``bits`` bits of each value when those already tell
    every distinct value apart (shingles are hashes, so short of ``2**(bits / 2)``
    distinct ones they nearly always do: one sort checks), else its rank among the
    distinct values (an argsort)."""
    s = np.sort(values)
    top = s >> np.uint64(64 - bits)
    distinct = s[1:] != s[:-1]
    if not (distinct & (top[1:] == top[:-1])).any():
        return values >> np.uint64(64 - bits)
    order = np.argsort(values)
    rank = np.zeros(len(s), dtype=np.uint64)
    np.cumsum(distinct, out=rank[1:])
    codes = np.empty(len(s), dtype=np.uint64)
    codes[order] = rank
    return codes


def exact_similar(shingles: _Shingles | _Candidates, a: np.ndarray, b: np.ndarray, threshold: float) -> np.ndarray:
    """Whether the exact Jaccard similarity of the shingle sets of each pair ``(a[i], b[i])``
    reaches ``threshold``.

    Every shingle of the documents involved gets a code that tells distinct shingles
    apart in the bits a key leaves it (:func:`_codes`), and one sort of ``(document,
    code)`` makes each document's set, in order. Then, in batches of about
    ``PAIR_SHINGLES`` shingles, each shingle of a pair becomes one integer ``(pair,
    code, side)``: the first sides of the batch come in order and so do the second, so
    a stable sort merges two sorted runs, and the shingles common to both sides of a pair
    end up next to each other.
    """
    out = np.zeros(len(a), dtype=bool)
    docs = np.unique(np.concatenate([a, b]))
    vals, starts, sizes = shingles.values_of(docs)
    code_bits = 63 - max(1, len(a).bit_length(), len(docs).bit_length())  # and one bit for the side
    if len(vals) >= 1 << code_bits:
        raise ValueError("too many shingles for one exact check")  # callers pass far fewer
    sets = (np.repeat(np.arange(len(docs), dtype=np.uint64), sizes) << np.uint64(code_bits)) | _codes(vals, code_bits)
    sets.sort()
    if len(sets):
        sets = sets[np.concatenate([[True], sets[1:] != sets[:-1]])]  # repeats dropped
    sizes = np.bincount((sets >> np.uint64(code_bits)).astype(np.int64), minlength=len(docs))
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    codes = sets & np.uint64((1 << code_bits) - 1)
    ia, ib = np.searchsorted(docs, a), np.searchsorted(docs, b)
    work = np.cumsum(sizes[ia] + sizes[ib])
    lo = 0
    while lo < len(a):
        hi = max(lo + 1, int(np.searchsorted(work, (work[lo - 1] if lo else 0) + PAIR_SHINGLES, side="right")))
        out[lo:hi] = _similar_batch(codes, code_bits, starts, sizes, ia[lo:hi], ib[lo:hi], threshold)
        lo = hi
    return out


def _similar_batch(codes: np.ndarray, code_bits: int, starts: np.ndarray, sizes: np.ndarray, ia: np.ndarray,
                   ib: np.ndarray, threshold: float) -> np.ndarray:
    """:func:`exact_similar` of one batch of pairs (documents by index into the sets)."""
    n = len(ia)
    la, lb = sizes[ia], sizes[ib]
    shift = np.uint64(code_bits + 1)
    key = np.concatenate([
        (np.repeat(np.arange(n, dtype=np.uint64), la) << shift) | (codes[_ranges(starts[ia], la)] << np.uint64(1)),
        (np.repeat(np.arange(n, dtype=np.uint64), lb) << shift) | (codes[_ranges(starts[ib], lb)] << np.uint64(1))
        | np.uint64(1)])
    key.sort(kind="stable")  # two sorted runs: a merge
    common = (key[1:] >> np.uint64(1)) == (key[:-1] >> np.uint64(1))  # the same shingle on both sides
    inter = np.bincount((key[1:][common] >> shift).astype(np.int64), minlength=n)
    union = la + lb - inter
    return np.where(union > 0, inter / np.maximum(union, 1) >= threshold, True)


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
        pairs, inverse = np.unique(np.stack([u, v], axis=1), axis=0, return_inverse=True)
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
