"""Verification of MinHash candidates: star edges kept only for pairs whose exact
Jaccard similarity reaches the threshold (documents are ``task << ROW_BITS | row``)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from shardwise.dedup.shingles import jaccard
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

    def get(self, task: int) -> dict[str, np.ndarray]:
        """Task ``task``'s arrays."""
        found = self.items.get(task)
        if found is not None:
            self.items.move_to_end(task)
            return found
        found = self.keys.load(task, self.names)
        if "lengths" in found:  # where each document's shingles start
            found["offsets"] = np.concatenate([[0], np.cumsum(found["lengths"])])
        self.loads += 1
        self.items[task] = found
        self.bytes += sum(a.nbytes for a in found.values())
        while self.bytes > self.max_bytes and len(self.items) > 1:
            _, old = self.items.popitem(last=False)
            self.bytes -= sum(a.nbytes for a in old.values())
        return found


class _Shingles:
    """Random access to the signatures and shingle sets of documents within a memory cap."""

    def __init__(self, keys: TaskKeys, max_bytes: int) -> None:
        self.tasks = TaskCache(keys, ["sig", "shingles", "lengths"], max_bytes)
        self.sets: dict[int, np.ndarray] = {}  # a candidate is met once per band it shares

    def sig_rows(self, docs: np.ndarray) -> np.ndarray:
        """The signatures of ``docs`` (one row each)."""
        task = (docs >> np.uint64(ROW_BITS)).astype(np.int64)
        row = (docs & np.uint64((1 << ROW_BITS) - 1)).astype(np.int64)
        out: np.ndarray | None = None
        for t in np.unique(task):
            sig = self.tasks.get(int(t))["sig"]
            if out is None:
                out = np.empty((len(docs), sig.shape[1]), dtype=sig.dtype)
            m = task == t
            out[m] = sig[row[m]]
        return out if out is not None else np.zeros((0, 0), np.uint64)

    def get(self, doc: int) -> np.ndarray:
        found = self.sets.get(doc)
        if found is None:
            found = self.sets[doc] = self._unique(doc)
        return found

    def _unique(self, doc: int) -> np.ndarray:
        task, row = doc >> ROW_BITS, doc & ((1 << ROW_BITS) - 1)
        d = self.tasks.get(task)
        off = d["offsets"]
        return np.unique(d["shingles"][off[row] : off[row + 1]])  # stored unsorted, with repeats


def verified_stars(keys: TaskKeys, threshold: float, num_perm: int, doc: np.ndarray, group: np.ndarray,
                   active: np.ndarray, u_out: list[np.ndarray], v_out: list[np.ndarray],
                   max_bytes: int = 2**62) -> int:
    """Star edges of each bucket to its smallest document, kept only when the pair really
    is similar; members rejected by their root form the next star of the bucket, and so
    on. ``doc`` is sorted within each ``group`` (bucket). Vectorised by rounds; returns the
    number of rejected pairs.

    A pair estimated (from the signatures) more than 4.5 standard deviations below the
    threshold is rejected, and one estimated as far above it accepted, without the exact
    Jaccard check that decides the rest; every distinct pair is checked once. At most
    ``max_bytes`` of the tasks' keys are kept in memory at a time (:class:`TaskCache`).
    """
    shingles = _Shingles(keys, max_bytes)
    sigma = float(np.sqrt(threshold * (1 - threshold) / num_perm))
    floor, ceiling = threshold - 4.5 * sigma, threshold + 4.5 * sigma
    checked: dict[tuple[int, int], bool] = {}
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
        for i in np.flatnonzero((est >= floor) & ~ok):
            key = (int(pairs[i, 0]), int(pairs[i, 1]))
            if key not in checked:
                checked[key] = jaccard(shingles.get(key[1]), shingles.get(key[0])) >= threshold
            ok[i] = checked[key]
        ok_member = ok[inverse.ravel()]
        rejected += int((~ok_member).sum())
        u_out.append(u[ok_member])
        v_out.append(v[ok_member])
        active[idx[member][ok_member]] = False  # joined its root; the rejected stay for the next star
    return rejected
