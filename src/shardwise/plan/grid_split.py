"""A canonical grid's global batch split among its ``C`` inner ranks so that every real
topology's ranks hold each source's share to within one sample (pure numpy).

Real rank ``r`` of ``N`` holds inner ranks ``r * C/N`` to ``(r + 1) * C/N - 1``
(:mod:`.canonical`), so for every divisor ``N`` of ``C`` the real ranks are ``N`` blocks
of consecutive inner ranks. When ``C`` is a prime power these blocks are nested and the
digit-reversed dealing of :mod:`.quota` holds every block within one sample. Otherwise
blocks of different divisors cross (``C = 6``: ranks ``0-2 | 3-5`` on two real ranks,
``0-1 | 2-3 | 4-5`` on three) and that dealing is only within two (1.63 measured).

The split here holds every block of every divisor within one. Inner rank ``j`` gets
``floor(G_s / C)`` of source ``s`` plus ``y[j, s]`` in ``{0, 1}``: the ``r_s = G_s mod C``
extras of each source, ``e = sum(r) / C`` in every inner rank. With ``F_s(t)`` the extras
of ``s`` in inner ranks ``[0, t)``, the conditions are, at the checkpoints ``t`` (the
multiples of a block size):

- ``F_s(b) - F_s(a)`` is ``floor`` or ``ceil`` of ``m * r_s / C`` for every block ``[a, b)``
  of size ``m``, and in ``[0, b - a]`` between consecutive checkpoints;
- ``sum_s F_s(t) = e * t``.

Per source these are difference constraints; their closure (shortest paths) gives the
exact range of every ``F_s(t)`` once some checkpoints are fixed. A depth-first search fixes
the checkpoints coarsest first, sources rounded up by largest remainder first, a
checkpoint whose sum leaves one choice fixed at once; the extras between two checkpoints
are then laid end to end. The search is complete. An integer program found every instance
feasible (every extras vector of ``C`` = 6 to 60, up to 3 to 8 sources by size:
``tools/strata_grid.py``), and this search split all of them within a few steps back. It
gives up after :data:`BUDGET` steps (``None``: the caller keeps the digit-reversed split,
and the plan's reported deviation shows it).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from math import gcd

import numpy as np

from shardwise.plan.quota import Schedule, planned

__all__ = ["BUDGET", "GridSchedule", "grid_planned", "holds", "nested", "split_extras"]

BUDGET = 20_000  # search steps before giving up on one split
_FAR = np.int64(1) << 40
Box = tuple[np.ndarray, np.ndarray]  # (k, checkpoints): the lowest and highest F_s(t)


def nested(ranks: int) -> bool:
    """Whether the blocks of consecutive ranks of every divisor of ``ranks`` are nested
    (``ranks`` is 1 or a prime power)."""
    p = next((q for q in range(2, ranks + 1) if ranks % q == 0), ranks)
    while ranks > 1 and ranks % p == 0:
        ranks //= p
    return ranks <= 1


@dataclass(frozen=True)
class _Grid:
    """The checkpoints of ``ranks`` inner ranks and the blocks between them."""

    ranks: int
    points: np.ndarray  # checkpoints, 0 and ranks included, ascending
    blocks: tuple[tuple[int, int, int], ...]  # (from, to, block size) by index
    atoms: tuple[tuple[int, int, int], ...]  # consecutive checkpoints (from, to, length)
    order: tuple[int, ...]  # the inner checkpoints, coarsest first (the search's order)


@lru_cache(maxsize=16)
def _grid(ranks: int) -> _Grid:
    sizes = [m for m in range(2, ranks) if ranks % m == 0]
    pts = sorted({0, ranks} | {t for m in sizes for t in range(0, ranks + 1, m)})
    at = {t: i for i, t in enumerate(pts)}
    blocks = tuple((at[a], at[a + m], m) for m in sizes for a in range(0, ranks, m))
    atoms = tuple((i, i + 1, pts[i + 1] - pts[i]) for i in range(len(pts) - 1))
    inner = sorted(range(1, len(pts) - 1), key=lambda i: (ranks // gcd(pts[i], ranks), pts[i]))
    return _Grid(ranks, np.asarray(pts, dtype=np.int64), blocks, atoms, tuple(inner))


def _closure(g: _Grid, r: np.ndarray) -> np.ndarray:
    """``d[s, a, b]``: the most ``F_s(b) - F_s(a)`` can be (shortest paths)."""
    return np.stack([_source_closure(int(x), g.ranks) for x in r.tolist()])


@lru_cache(maxsize=256)
def _source_closure(extras: int, ranks: int) -> np.ndarray:
    """The closure of one source's difference constraints (it depends on nothing else)."""
    g = _grid(ranks)
    p = len(g.points)
    d = np.full((p, p), _FAR, dtype=np.int64)
    d[np.arange(p), np.arange(p)] = 0
    for a, b, m in g.blocks:
        d[a, b] = min(d[a, b], -(-(m * extras) // ranks))
        d[b, a] = min(d[b, a], -((m * extras) // ranks))
    for a, b, n in g.atoms:
        d[a, b], d[b, a] = min(d[a, b], n), min(d[b, a], 0)
    for w in range(p):
        d = np.minimum(d, d[:, w, None] + d[None, w, :])
    d.flags.writeable = False
    return d


def _fix(d: np.ndarray, box: Box, i: int, v: np.ndarray) -> Box:
    """The ranges of every ``F_s(t)`` once ``F(points[i]) = v``."""
    lo, hi = box
    return np.maximum(lo, v[:, None] - d[:, :, i]), np.minimum(hi, v[:, None] + d[:, i, :])


def _settle(d: np.ndarray, box: Box, need: np.ndarray) -> Box | None:
    """``box`` with every checkpoint whose sum leaves one choice fixed (and what that
    implies, again), or None if a range is empty or a checkpoint's sum out of reach."""
    while True:
        lo, hi = box
        if (lo > hi).any():
            return None
        low, high = lo.sum(axis=0), hi.sum(axis=0)
        if (low > need).any() or (high < need).any():
            return None
        forced = np.flatnonzero(((low == need) | (high == need)) & (low < high))
        if not len(forced):
            return box
        i = int(forced[0])
        box = _fix(d, box, i, lo[:, i] if low[i] == need[i] else hi[:, i])


def _choices(box: Box, i: int, need: int, first: np.ndarray) -> Iterator[np.ndarray]:
    """Every ``F(points[i])`` in range with the right sum, sources ``first`` first."""
    lo, hi = box[0][:, i], box[1][:, i]
    caps, extra = hi - lo, int(need - lo.sum())
    order = [int(s) for s in first if caps[s] > 0]

    def go(at: int, left: int, cur: np.ndarray) -> Iterator[np.ndarray]:
        if left == 0:
            yield lo + cur
            return
        if at == len(order) or left > int(caps[order[at:]].sum()):
            return
        s = order[at]
        for v in range(min(int(caps[s]), left), -1, -1):
            cur[s] = v
            yield from go(at + 1, left - v, cur)
        cur[s] = 0

    yield from go(0, extra, np.zeros_like(lo))


def _first(g: _Grid, r: np.ndarray, i: int) -> np.ndarray:
    """Sources by the remainder of their share at checkpoint ``i``, largest first."""
    return np.argsort(-((g.points[i] * r) % g.ranks), kind="stable")


def _search(g: _Grid, r: np.ndarray, budget: int) -> np.ndarray | None:
    """``(checkpoints, k)``: every ``F_s(t)``, or None (infeasible or over budget)."""
    d = _closure(g, r)
    if (d[:, np.arange(len(g.points)), np.arange(len(g.points))] < 0).any():
        return None
    need = int(r.sum()) // g.ranks * g.points
    k, last = len(r), len(g.points) - 1
    box: Box = (np.full((k, last + 1), -_FAR), np.full((k, last + 1), _FAR))
    start = _settle(d, _fix(d, _fix(d, box, 0, np.zeros(k, dtype=np.int64)), last, r), need)
    if start is None:
        return None
    box = start
    if not g.order:
        return box[0].T

    def node(at: int, box: Box) -> tuple[int, Iterator[np.ndarray], Box]:
        i = g.order[at]
        return at, _choices(box, i, int(need[i]), _first(g, r, i)), box

    stack = [node(0, box)]
    for _ in range(budget):
        if not stack:
            return None
        at, gen, box = stack[-1]
        v = next(gen, None)
        if v is None:
            stack.pop()
            continue
        nbox = _settle(d, _fix(d, box, g.order[at], v), need)
        if nbox is None:
            continue
        if at == len(g.order) - 1:
            return nbox[0].T
        stack.append(node(at + 1, nbox))
    return None


def _lay(g: _Grid, f: np.ndarray) -> np.ndarray:
    """``(ranks, k)`` 0/1: the extras between consecutive checkpoints laid end to end."""
    y = np.zeros((g.ranks, f.shape[1]), dtype=np.int64)
    for (a, _, n), diff in zip(g.atoms, np.diff(f, axis=0)):
        src = np.repeat(np.arange(f.shape[1]), diff)
        y[g.points[a] + np.arange(len(src)) % n, src] = 1
    return y


def holds(y: np.ndarray, r: np.ndarray, ranks: int) -> bool:
    """Whether ``y`` (``(ranks, k)``, 0/1) takes ``r`` extras of each source, the same
    number in every inner rank, and every block of every divisor within one of its share."""
    if y.min(initial=0) < 0 or y.max(initial=0) > 1 or (y.sum(axis=0) != r).any():
        return False
    if len(set(y.sum(axis=1).tolist())) > 1:
        return False
    for n in (n for n in range(1, ranks + 1) if ranks % n == 0):
        got = y.reshape(n, ranks // n, -1).sum(axis=1)
        if (got < r // n).any() or (got > -(-r // n)).any():
            return False
    return True


@lru_cache(maxsize=4096)
def split_extras(extras: tuple[int, ...], ranks: int) -> np.ndarray | None:
    """``(ranks, S)`` 0/1: which inner ranks take one more of each source, for ``extras``
    (each below ``ranks``, their sum a multiple of it), every divisor's blocks within one
    of their share; None if the search gave up (it never has: see the module doc)."""
    r = np.asarray(extras, dtype=np.int64)
    live = np.flatnonzero(r)
    out = np.zeros((ranks, len(r)), dtype=np.int64)
    if len(live):
        f = _search(_grid(ranks), r[live], BUDGET)
        if f is None:
            return None
        out[:, live] = _lay(_grid(ranks), f)
    if not holds(out, r, ranks):
        return None
    out.flags.writeable = False
    return out


class GridSchedule(Schedule):
    """The :class:`~.quota.Schedule` of a canonical grid of ``ranks`` inner ranks (not a
    prime power): every global batch split by :func:`split_extras`, so that the blocks of
    consecutive inner ranks of every divisor hold each source's share to within one. The
    ``k``-th batch with the same extras takes its split reversed when ``k`` is odd
    (reversing keeps every block), so that no inner rank always takes the extras; a batch
    whose search gave up keeps the digit-reversed split of :class:`~.quota.Schedule`."""

    def __init__(self, table: np.ndarray, ranks: int) -> None:
        super().__init__(table, ranks)
        n, sources = self.table.shape
        uniq, which = _distinct(self._extras, self.ranks)
        splits = [split_extras(tuple(int(x) for x in u), self.ranks) for u in uniq.tolist()]
        self._kept = np.array([s is None for s in splits], dtype=bool)
        none = np.zeros((self.ranks, sources), dtype=np.int64)
        self._splits = np.stack([none if s is None else s for s in splits] or [none])
        order = np.argsort(which, kind="stable")
        counts = np.bincount(which, minlength=len(uniq))
        seen = np.empty(n, dtype=np.int64)
        seen[order] = np.arange(n) - (np.cumsum(counts) - counts)[which[order]]
        self._which, self._flip = which, seen % 2 == 1

    def rank(self, rank: int) -> np.ndarray:
        """``(batches, S)``: the samples of each source in each batch of ``rank``."""
        at = np.where(self._flip, self.ranks - 1 - rank, rank)
        out = self._base + self._splits[self._which, at]
        kept = self._kept[self._which]
        if kept.any():
            out[kept] = super().rank(rank)[kept]
        return np.asarray(out, dtype=np.int64)


def _distinct(rows: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of ``rows`` (entries below ``base``) and, for each row, which of
    them it is (rows read as numbers in ``base`` when they fit in 62 bits: faster)."""
    if not len(rows):
        return rows[:0], np.zeros(0, dtype=np.int64)
    if rows.shape[1] * np.log2(max(base, 2)) < 62:
        weights = np.int64(base) ** np.arange(rows.shape[1], dtype=np.int64)
        _, first, which = np.unique(rows @ weights, return_index=True, return_inverse=True)
        return rows[first], np.asarray(which, dtype=np.int64).reshape(-1)
    uniq, which = np.unique(rows, axis=0, return_inverse=True)
    return uniq, np.asarray(which, dtype=np.int64).reshape(-1)


def grid_planned(totals: np.ndarray, batches: int, ranks: int) -> Schedule:
    """:func:`~.quota.planned` for a canonical grid's ``ranks`` inner ranks: a
    :class:`GridSchedule` unless ``ranks`` is a prime power (then the digit-reversed split
    already holds every divisor's blocks within one)."""
    sched = planned(totals, batches, ranks)
    return sched if nested(ranks) else GridSchedule(sched.table, ranks)
