"""Candidate documents' shingle sets for verification (documents are
``task << ROW_BITS | row``): gathered once when they fit a memory budget
(:class:`Candidates`), else read from the tasks' keys through a bounded cache
(:class:`TaskShingles` over :class:`TaskCache`)."""

from __future__ import annotations

import mmap
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from shardwise.dedup.sets import LOOP_FROM, distinct, take_ranges
from shardwise.ops.dedup import TaskKeys

__all__ = ["ROW_BITS", "Candidates", "TaskCache", "TaskShingles", "split_ids"]

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


class TaskShingles:
    """Random access to the shingle sets of documents within a memory cap."""

    def __init__(self, keys: TaskKeys, max_bytes: int) -> None:
        self.tasks = TaskCache(keys, ["shingles", "lengths"], max_bytes)

    def sizes_of(self, docs: np.ndarray) -> np.ndarray:
        """The set sizes of the sorted unique ``docs``."""
        task, row = split_ids(docs)
        sizes = np.zeros(len(docs), dtype=np.int64)
        for t in distinct(task):
            m = task == t
            sizes[m] = self.tasks.get(int(t), ["lengths"])["lengths"][row[m]]
        return sizes

    def values_of(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The shingle sets of the sorted unique ``docs``: ``(values, starts)``, document
        ``i``'s at ``values[starts[i]:starts[i] + size]``."""
        task, row = split_ids(docs)
        vals: list[np.ndarray] = []
        sizes = np.zeros(len(docs), dtype=np.int64)
        for t in distinct(task):  # docs are sorted, so by task and then by row
            d = self.tasks.get(int(t), ["shingles", "lengths"])
            idx = np.flatnonzero(task == t)
            lo, n = d["offsets"][row[idx]], d["lengths"][row[idx]]
            vals.append(take_ranges(d["shingles"], lo, n))
            sizes[idx] = n
        v = np.concatenate(vals) if vals else np.zeros(0, np.uint64)
        return v, np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    def sets_of(self, docs: np.ndarray) -> list[np.ndarray]:
        """The shingle set of each of the sorted unique ``docs``, copied out of the cached
        tasks (a view would keep a task's whole arrays past the cache's cap)."""
        values, starts = self.values_of(docs)
        return [values[s : s + n] for s, n in zip(starts.tolist(), self.sizes_of(docs).tolist())]


def split_ids(docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(task, row)`` of document ids."""
    return (docs >> np.uint64(ROW_BITS)).astype(np.int64), (
        docs & np.uint64((1 << ROW_BITS) - 1)
    ).astype(np.int64)


class Candidates:
    """The shingle sets of a fixed set of documents (sorted unique ``docs``),
    gathered in one pass over the tasks, each task's keys read once: what a verifying edges
    task needs when its candidates fit in its share of the memory budget (a cache of whole
    tasks would read every task again in every round once they do not all fit)."""

    def __init__(
        self,
        docs: np.ndarray,
        values: np.ndarray,
        sizes: np.ndarray,
        views: list[np.ndarray] | None = None,
    ) -> None:
        self.docs, self.values, self.sizes, self.views = docs, values, sizes, views
        self.starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    @classmethod
    def gather(cls, keys: TaskKeys, docs: np.ndarray, max_bytes: int) -> Candidates | None:
        """The rows of ``docs``, or None when they would pass ``max_bytes``: their sizes
        first, then their shingles copied once, straight into one array."""
        task, row = split_ids(docs)
        found: list[
            tuple[np.ndarray, np.ndarray, np.ndarray]
        ] = []  # (shingles, starts, sizes) per task
        used = 0
        for t in distinct(task):  # docs are sorted, so by task and then by row
            d = keys.load(int(t), ["shingles", "lengths"])
            r = row[task == t]
            n = d["lengths"][r].astype(np.int64)
            found.append((d["shingles"], np.concatenate([[0], np.cumsum(d["lengths"])])[r], n))
            used += int(n.sum()) * d["shingles"].itemsize + n.nbytes
            if used > max_bytes:
                return None
        if not found:
            return cls(docs, np.zeros(0, np.uint64), np.zeros(0, np.int64))
        sizes = np.concatenate([n for _, _, n in found])
        # views of the mapped key files when the sets are long (no copy); short ones are
        # copied by one index, cheaper than a view each
        if int(sizes.sum()) >= LOOP_FROM * len(sizes) and all(
            _mapped(shingles) for shingles, _, _ in found
        ):
            views = [sh[s : s + k] for sh, at, n in found for s, k in zip(at.tolist(), n.tolist())]
            return cls(docs, np.zeros(0, np.uint64), sizes, views)
        values = np.empty(int(sizes.sum()), dtype=np.uint64)
        at = 0
        for shingles, starts, n in found:
            k = int(n.sum())
            take_ranges(shingles, starts, n, out=values[at : at + k])
            at += k
        return cls(docs, values, sizes)

    def sizes_of(self, docs: np.ndarray) -> np.ndarray:
        """The set sizes of the sorted unique ``docs`` (all among the gathered ones)."""
        return self.sizes[np.searchsorted(self.docs, docs)]

    def values_of(self, docs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`TaskShingles.values_of`, for sorted unique ``docs`` among the gathered
        ones: the gathered values themselves (no copy) and where each document's start
        (held as views: theirs, copied side by side)."""
        idx = np.searchsorted(self.docs, docs)
        if self.views is None:
            return self.values, self.starts[idx]
        parts = [self.views[i] for i in idx.tolist()]
        values = np.concatenate(parts) if parts else np.zeros(0, np.uint64)
        return values, np.concatenate([[0], np.cumsum(self.sizes[idx])[:-1]]).astype(np.int64)

    def sets_of(self, docs: np.ndarray) -> list[np.ndarray]:
        """The shingle set of each of the sorted unique ``docs`` (views, no copies)."""
        idx = np.searchsorted(self.docs, docs).tolist()
        if self.views is not None:
            return [self.views[i] for i in idx]
        return [self.values[self.starts[i] : self.starts[i] + self.sizes[i]] for i in idx]


def _mapped(a: np.ndarray) -> bool:
    """Whether ``a`` is a view of a memory-mapped file (pages the kernel can drop and read
    again), not memory of this process's own."""
    base: object = a
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap)
