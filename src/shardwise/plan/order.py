"""Seeded orders (pure numpy): which units go to which worker and window, and the
order of a window's samples. Both are stratified, so data stored sorted or clustered
still mixes well."""

from __future__ import annotations

import heapq

import numpy as np
import numpy.random  # numpy loads it lazily: ~5 ms of the first plan otherwise

__all__ = ["rng_for", "spread_order", "stratified_order"]

# stream names mixed into the seeds of the unit order, row orders and window orders
UNITS, ROWS, WINDOW = 0x556E, 0x526F, 0x5769


def rng_for(*key: int) -> np.random.Generator:
    """A generator seeded by ``key`` (64-bit parts split in two 32-bit words)."""
    return np.random.default_rng([k & 0xFFFFFFFF for k in key] + [k >> 32 for k in key])


def spread_order(
    counts: np.ndarray, slots: int, interleave: int, rng: np.random.Generator
) -> np.ndarray:
    """A random order of the units in which every worker's piece, and every window of at
    most ``interleave`` units inside it, draws its samples from all over the dataset.

    Data is often stored sorted or clustered (by label, source, language, date), so
    neighbouring units are alike. A uniform permutation gives each worker a random subset,
    whose make-up can differ a lot from the whole (more so when units differ in size), and
    each window a smaller random subset that differs more. Here units are dealt out in
    file order, in runs shuffled at random, each to the worker holding the fewest samples
    so far; each worker's units are dealt to its windows the same way; units are then
    ordered by worker and window, at random inside a window. At every point of the file
    each worker, and each window, has about its share of the samples so far: a stratified
    sample instead of a simple one, with no unit read more often and no extra memory.
    """
    counts = np.asarray(counts, dtype=np.int64)
    n = len(counts)
    worker = _deal(counts, slots, rng)
    window = np.zeros(n, dtype=np.int64)
    by_worker = np.argsort(worker, kind="stable")  # each worker's units, in file order
    for mine in np.split(by_worker, np.cumsum(np.bincount(worker, minlength=slots))[:-1]):
        window[mine] = _deal(counts[mine], -(-len(mine) // interleave), rng)
    return np.lexsort((rng.random(n), window, worker)).astype(np.int64)


def stratified_order(keys: np.ndarray, batch_size: int, rng: np.random.Generator) -> np.ndarray:
    """A random order of ``len(keys)`` samples in which every run of ``batch_size``
    consecutive samples holds each key (unit) in proportion to its share, give or take one.

    The samples, sorted by key (units in file order; inside a unit they are already in
    the epoch's random row order), are dealt out one at a time to ``ceil(n / batch_size)``
    groups in turn; the groups come in random order and each group's samples in random
    order. A uniform permutation gives batches whose make-up varies by chance around the
    window's (by a total-variation distance of about 0.075 for batches of 256 over 10
    equal classes); dealt batches are each a systematic sample of the window, so on data
    stored sorted or clustered they are close to its make-up, while which samples meet
    in a batch is still random in every epoch.
    """
    n = len(keys)
    groups = max(1, -(-n // max(1, batch_size)))
    per = -(-n // groups)
    by_key = np.argsort(keys, kind="stable")
    # deal[g, j] = j * groups + g: the j-th sample dealt to group g (past n: none); each
    # group's members are shuffled, the groups put in random order, and read group by group
    deal = (
        np.arange(per, dtype=np.int64)[None, :] * groups
        + np.arange(groups, dtype=np.int64)[:, None]
    )
    dealt = rng.permuted(deal, axis=1)[rng.permutation(groups)].ravel()
    picked: np.ndarray = by_key[dealt[dealt < n]]
    return picked


def _deal(sizes: np.ndarray, bins: int, rng: np.random.Generator) -> np.ndarray:
    """The bin of each item (given in file order): items are taken in runs of ``bins``,
    shuffled inside each run, and each goes to the bin with the fewest samples so far."""
    n = len(sizes)
    if bins <= 1 or n == 0:
        return np.zeros(n, dtype=np.int64)
    # a bin's heap key packs (samples so far, tie rank): ints compare faster than tuples and
    # order alike. The list starts in bin order, as the frozen plans were made (pop and push
    # on it exactly as before, so the same bin comes off every time)
    rank = rng.permutation(bins)  # ties: a random bin order
    shift = int(bins).bit_length()
    bin_of = np.empty(bins, dtype=np.int64)
    bin_of[rank] = np.arange(bins)
    heap = rank.tolist()
    sizes_list = [int(x) << shift for x in sizes.tolist()]
    mask = (1 << shift) - 1
    picked = [0] * n
    pop, push = heapq.heappop, heapq.heappush
    for i in np.lexsort((rng.random(n), np.arange(n) // bins)).tolist():
        key = pop(heap)
        picked[i] = key & mask
        push(heap, key + sizes_list[i])
    out: np.ndarray = bin_of[np.asarray(picked, dtype=np.int64)]
    return out
