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
(the real ranks of a canonical grid, see :mod:`.canonical`) hold a source's extras evenly.
"""

from __future__ import annotations

import heapq
from functools import lru_cache

import numpy as np

__all__ = ["deviation", "schedule", "split", "spread", "spread_ranks"]


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


def split(batches: np.ndarray, ranks: int) -> np.ndarray:
    """``(n, ranks, S)`` counts: each global batch of ``batches`` (``(n, S)``) split among
    ``ranks`` ranks, ``floor(G_s / ranks)`` or one more each, every rank the same total."""
    batches = np.asarray(batches, dtype=np.int64)
    n, sources = batches.shape
    base = batches // ranks
    extras = batches - base * ranks
    # the extras of a batch laid end to end from an offset that turns with the first
    # source's running count of extras, so each rank gets its turn
    lead = extras[:, int(np.argmax(extras.sum(axis=0)))] if sources else np.zeros(n, int)
    offset = (np.cumsum(lead) - lead) % ranks
    start = (np.cumsum(extras, axis=1) - extras + offset[:, None]) % ranks
    where = np.empty(ranks, dtype=np.int64)
    where[spread_ranks(ranks)] = np.arange(ranks)  # the position each rank takes
    pos = where[None, :, None]
    hit = (pos - start[:, None, :]) % ranks < extras[:, None, :]
    return np.asarray(base[:, None, :] + hit, dtype=np.int64)


def schedule(totals: np.ndarray, batches: int, ranks: int) -> np.ndarray:
    """``(batches, ranks, S)``: the samples of each source in every rank's batch of every
    global batch (:func:`spread`, then :func:`split`; kept for the last few arguments, as
    every worker and every resume plans the same epoch again). Read-only."""
    return _schedule(tuple(int(x) for x in np.asarray(totals).tolist()), int(batches), int(ranks))


@lru_cache(maxsize=8)
def _schedule(totals: tuple[int, ...], batches: int, ranks: int) -> np.ndarray:
    table = split(spread(np.asarray(totals, dtype=np.int64), batches), ranks)
    table.flags.writeable = False
    return table


def deviation(table: np.ndarray) -> dict[str, list[float]]:
    """Per source, how far batches are from its share of them (``table`` as
    :func:`schedule` gives it): the worst and the mean ``|count - share|`` over global
    batches and over ranks' batches, and the realised count."""
    table = np.asarray(table, dtype=np.int64)
    n, ranks, _ = table.shape
    totals = table.sum(axis=(0, 1))
    if not n:
        zero = [0.0] * len(totals)
        return {k: zero for k in ("global_worst", "global_mean", "rank_worst", "rank_mean")} | {
            "realised": [int(x) for x in totals]
        }
    g = np.abs(table.sum(axis=1) - totals / n)
    r = np.abs(table - totals / (n * ranks))
    return {
        "global_worst": g.max(axis=0).tolist(),
        "global_mean": g.mean(axis=0).tolist(),
        "rank_worst": r.max(axis=(0, 1)).tolist(),
        "rank_mean": r.mean(axis=(0, 1)).tolist(),
        "realised": [int(x) for x in totals],
    }
