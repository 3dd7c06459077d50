"""How many samples of each source every batch of a stratified epoch holds (pure numpy).

An epoch of ``n`` global batches of ``G`` samples takes exactly ``totals[s]`` samples of
source ``s`` (``sum(totals) == n * G``). Every global batch gets ``floor(totals[s] / n)``
or one more of each source (:func:`spread`), so the ``totals[s] % n`` extras of a source
fall in distinct batches; they are given by earliest deadline, carrying the remainders
from batch to batch as Bresenham's line does, so the running count of every source stays
near ``i * totals[s] / n`` and a source whose share is below one sample still comes in
its turn. Each global batch is then split among its ``R`` ranks the same way
(:func:`split`): ``floor(G_s / R)`` or one more each, every rank exactly ``G / R``.

So every global batch, and every rank's batch, holds each source's share to within one
sample, and the epoch's counts are the totals exactly. The extras of one global batch
are laid end to end, source after source, from an offset that turns from batch to batch,
and dealt to the ranks in digit-reversed order (:func:`spread_ranks`): with ``R`` a
product of primes ``p1 <= p2 <= ...``, any ``p1 * ... * pi`` consecutive blocks of ranks
(the real ranks of a canonical grid, see :mod:`.canonical`) hold a source's extras evenly;
a grid that is not a prime power is split by :mod:`.grid_split` instead.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from functools import lru_cache

import numpy as np

__all__ = ["Schedule", "deviation", "planned", "schedule", "split", "spread", "spread_ranks"]


def spread(totals: np.ndarray, n: int) -> np.ndarray:
    """``(n, S)`` counts: row ``i`` the samples of each source in batch ``i``; columns sum
    to ``totals``, every entry is ``floor(totals[s] / n)`` or one more, and every row sums
    to ``sum(totals) / n`` (which must be whole)."""
    totals = np.asarray(totals, dtype=np.int64)
    out = np.repeat((totals // n)[None, :], n, axis=0) if n else np.zeros((0, len(totals)), int)
    extras = (totals - (totals // n) * n).tolist() if n else [0] * len(totals)
    per_batch = sum(extras) // n if n else 0
    for i, chosen in enumerate(_extras_by_deadline(extras, n, per_batch)):
        out[i, chosen] += 1
    return np.asarray(out, dtype=np.int64)


def _extras_by_deadline(extras: list[int], n: int, per_batch: int) -> list[list[int]]:
    """For each of ``n`` batches, the ``per_batch`` distinct sources that get one more.

    Source ``s``'s ``k``-th extra is due by batch ``ceil(k * n / e) - 1`` (so its running
    count never falls a whole sample behind ``i * e / n``) and may come from batch
    ``floor((k - 1) * n / e)``; batches take the released extras due first. A source
    whose remaining extras equal the batches left is taken before all others, so the
    epoch always ends with every extra given."""
    done = [0] * len(extras)
    live = [s for s, e in enumerate(extras) if e]
    out: list[list[int]] = []
    for i in range(n):
        keys = []
        for s in live:
            e, k = extras[s], done[s] + 1
            forced = e - done[s] == n - i
            released = (k - 1) * n <= i * e
            due = -(-k * n // e) - 1
            keys.append((not forced, not released, due, -e, s))
        chosen = [key[-1] for key in heapq.nsmallest(per_batch, keys)]
        for s in chosen:
            done[s] += 1
        live = [s for s in live if done[s] < extras[s]]
        out.append(chosen)
    return out


def spread_ranks(ranks: int) -> np.ndarray:
    """Digit-reversed order of ``ranks`` (prime factors ascending): position ``j`` goes to
    rank ``order[j]``, and ``order[j] // (ranks // M) == f(j % M)`` for a bijection ``f``
    whenever ``M`` is a product of the first few factors."""
    factors, r, p = [], ranks, 2
    while r > 1:
        while r % p == 0:
            factors.append(p)
            r //= p
        p += 1
    j = np.arange(ranks, dtype=np.int64)
    order, rest, scale = np.zeros(ranks, dtype=np.int64), j.copy(), ranks
    for f in factors:
        scale //= f
        order += (rest % f) * scale
        rest //= f
    return order


class Schedule:
    """The samples of each source in every global batch, and, computed per rank when asked
    (a table of every rank's batches of a long epoch would be large), in every rank's
    batch: each global batch split among ``ranks`` ranks, ``floor(G_s / ranks)`` or one
    more each, every rank the same total.

    Args:
        table: ``(batches, S)``, the global batches (see :func:`spread`, :func:`planned`).
        ranks: ranks a global batch is split among.
    """

    def __init__(self, table: np.ndarray, ranks: int) -> None:
        self.table = np.asarray(table, dtype=np.int64)
        self.ranks = int(ranks)
        self._base = self.table // self.ranks
        self._extras = self.table - self._base * self.ranks
        n, sources = self.table.shape
        # the extras of a batch laid end to end from an offset that turns with the running
        # count of the source with the most extras, so each rank gets its turn
        lead = (
            self._extras[:, int(np.argmax(self._extras.sum(axis=0)))]
            if sources
            else np.zeros(n, dtype=np.int64)
        )
        offset = (np.cumsum(lead) - lead) % self.ranks
        self._start = (
            np.cumsum(self._extras, axis=1) - self._extras + offset[:, None]
        ) % self.ranks
        self._where = np.empty(self.ranks, dtype=np.int64)
        self._where[spread_ranks(self.ranks)] = np.arange(self.ranks)  # each rank's position

    def rank(self, rank: int) -> np.ndarray:
        """``(batches, S)``: the samples of each source in each batch of ``rank``."""
        hit = (self._where[rank] - self._start) % self.ranks < self._extras
        return np.asarray(self._base + hit, dtype=np.int64)

    def ranks_of(self, first: int, groups: int) -> Iterator[np.ndarray]:
        """From global batch ``first`` on, the batches of ``groups`` groups of consecutive
        ranks (the real ranks of a canonical grid), one ``(batches, S)`` table each."""
        per = self.ranks // groups
        for g in range(groups):
            out = self.rank(g * per)[first:]
            for k in range(g * per + 1, (g + 1) * per):
                out = out + self.rank(k)[first:]
            yield out


def split(batches: np.ndarray, ranks: int) -> np.ndarray:
    """``(n, ranks, S)``: each global batch of ``batches`` (``(n, S)``) split among ``ranks``
    ranks as :class:`Schedule` does (small epochs: tests and tools)."""
    sched = Schedule(batches, ranks)
    n, sources = sched.table.shape
    return np.stack([sched.rank(r) for r in range(ranks)], axis=1).reshape(n, ranks, sources)


def planned(totals: np.ndarray, batches: int, ranks: int) -> Schedule:
    """The :class:`Schedule` of an epoch (its global batches by :func:`spread`, kept for the
    last few arguments: every worker and every resume plans the same epoch again)."""
    key = tuple(int(x) for x in np.asarray(totals).tolist())
    return Schedule(_spread(key, int(batches)), ranks)


def schedule(totals: np.ndarray, batches: int, ranks: int) -> np.ndarray:
    """``(batches, ranks, S)``: every rank's batches of an epoch (small epochs: tests)."""
    return split(planned(totals, batches, ranks).table, ranks)


@lru_cache(maxsize=8)
def _spread(totals: tuple[int, ...], batches: int) -> np.ndarray:
    table = spread(np.asarray(totals, dtype=np.int64), batches)
    table.flags.writeable = False
    return table


def deviation(sched: Schedule, first: int = 0, groups: int | None = None) -> dict[str, list[float]]:
    """Per source, how far batches from global batch ``first`` on are from its share of
    them: the worst and the mean ``|count - share|`` over global batches and over ranks'
    batches (``groups`` ranks of consecutive grid ranks; default: every rank), and the
    realised count."""
    table = sched.table[first:]
    n, groups = len(table), groups or sched.ranks
    totals = table.sum(axis=0)
    out = {k: [0.0] * len(totals) for k in ("global_worst", "global_mean")}
    out |= {k: [0.0] * len(totals) for k in ("rank_worst", "rank_mean")}
    if n:
        g = np.abs(table - totals / n)
        out["global_worst"], out["global_mean"] = g.max(axis=0).tolist(), g.mean(axis=0).tolist()
        worst, mean = np.zeros(len(totals)), np.zeros(len(totals))
        for counts in sched.ranks_of(first, groups):
            r = np.abs(counts - totals / (n * groups))
            worst, mean = np.maximum(worst, r.max(axis=0)), mean + r.mean(axis=0) / groups
        out["rank_worst"], out["rank_mean"] = worst.tolist(), mean.tolist()
    return out | {"realised": [int(x) for x in totals]}
