"""One-permutation MinHash (``"oph"``, the default scheme of
:func:`~shardwise.dedup.signatures.signatures`), densified by each shingle's own order of
the bins.

Every shingle is hashed once, and the hash picks one of at least 2**17 fixed random orders
of the ``k`` bins. Bin ``i`` keeps the shingle whose order puts ``i`` earliest (a tie goes
to the smaller hash) and stores that shingle's hash. The first bin of a random order is
uniformly random, so where every bin is some shingle's first (long documents) this is
one-permutation hashing (Li, Owen and Zhang, 2012), and only bins left empty look further
down the orders. In a short document most bins are empty and each takes the shingle that
ranks it best, like a minimum over independent hash functions (the fast similarity sketch
of Dahlgaard, Knudsen and Thorup, 2017, works this way). A shingle's order depends on its
hash alone, so two documents agree at a bin exactly when the winner of their union there
lies in both: the fraction of equal positions estimates the Jaccard similarity without
bias, with no more spread than ``k`` independent permutations. (Densifying by bins
instead, an empty bin copying a filled one, errs by whole multiples of ``1 / n`` on
documents of ``n`` shingles whenever two of them share a bin; that was the scheme before.)

The same values are computed in one of two ways, chosen per document by its number of
shingles ``n``. Up to ``k``: each shingle's row of ``k`` ranks comes from a small table
(one or two bytes per bin) and every bin takes the smallest (rank, place in hash order),
``n * k`` byte operations for all the documents of one length at once. Above: each
shingle fills its first bin, then in round ``t`` every shingle visits its ``t``-th bin and
a still-empty bin takes the smallest hash among that round's visitors, until no bin is
empty: ``O(n + k log k)`` steps, in blocks of rounds over all such documents at once. A
search for filled bins, the old way, takes about ``k**2 / n`` steps instead, most of the
time of a dedup of 70-character texts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardwise.dedup.sets import distinct
from shardwise.dedup.shingles import _mix

__all__ = ["CHUNK", "EMPTY", "one_permutation"]

EMPTY = np.uint64(0xFFFFFFFFFFFFFFFF)  # every value of an empty document's signature
_GOLDEN = 0x9E3779B97F4A7C15
CHUNK = 1 << 21  # elements of a temporary (documents x shingles x bins) array
_ORDERS = 1 << 18  # bin orders, rounded down to (power of two) * k: at least 2**17
# documents of at most this times num_perm shingles go by the rank table (medium texts:
# -20% CPU against 1.0, in groups of padded widths)
_TABLE_UP_TO = 0.5


@dataclass(frozen=True)
class _Orders:
    """The bin orders of one ``(num_perm, seed)``. Order ``(p, r)`` is base permutation
    ``p`` with every bin moved ``r`` places on (mod ``k``): its ``t``-th bin is
    ``(by_round[t, p] + r) % k``. ``keys[p, j]`` is the place of bin ``j % k`` in base ``p``
    (``j < 2 * k``), shifted left by ``shift`` bits to leave room for a tie-breaking place,
    so that the ``k`` keys of order ``(p, r)`` are the window ``keys[p, k - r : 2 * k - r]``.
    A bin stores the top ``64 - shift`` bits of its shingle's hash (while densifying, the
    round goes above them)."""

    by_round: np.ndarray
    keys: np.ndarray
    shift: int


_tables: dict[tuple[int, int], _Orders] = {}


def one_permutation(shingles: np.ndarray, offsets: np.ndarray, sig: np.ndarray, seed: int) -> None:
    """Fill ``sig`` (``(n_docs, k)``, all ``EMPTY``) with the signatures of the non-empty
    documents: short ones by the rank table, longer ones by rounds (the same values; see
    the module docstring)."""
    k = sig.shape[1]
    tab = _orders(k, seed)
    h = _mix(shingles ^ np.uint64(seed * _GOLDEN % 2**64))
    bits = len(tab.keys).bit_length() - 1  # top bits: the base permutation; low bits: its turn
    base = (h >> np.uint64(64 - bits)).astype(np.int32) if bits else np.zeros(len(h), np.int32)
    rot = ((h & np.uint64(0xFFFFFFFF)) * np.uint64(k) >> np.uint64(32)).astype(np.uint16)
    lengths = np.diff(offsets)
    short = (lengths > 0) & (lengths <= min(_TABLE_UP_TO * k, (1 << tab.shift) - 1))
    _by_table(h, base, rot, offsets, sig, np.flatnonzero(short), tab)
    _by_rounds(h, base, rot, offsets, sig, ~short & (lengths > 0), tab)


def _orders(k: int, seed: int) -> _Orders:
    """The bin orders for ``k`` bins: every rotation of ``2**18 / k`` (rounded down to a
    power of two) random permutations, so each bin is equally often an order's ``t``-th,
    for every ``t``. From the hash of ``(seed, permutation, bin)``, the same on every machine; built
    once per process for each ``(k, seed)`` (about 1 MB for ``k = 128``)."""
    found = _tables.get((k, seed))
    if found is None:
        n_base = 1 << max(0, (_ORDERS // k).bit_length() - 1)
        salt = np.uint64((seed * _GOLDEN + 0x4F52444552) % 2**64)
        p = np.arange(n_base, dtype=np.uint64)[:, None] << np.uint64(32)
        keys = _mix((p | np.arange(k, dtype=np.uint64)[None, :]) ^ salt)
        # a row's keys are distinct (a bijective mix of distinct values)
        base = np.argsort(keys, axis=1)
        shift, kdt = (8, np.uint16) if k <= 256 else (16, np.uint32)
        rank = np.empty((n_base, k), dtype=kdt)
        np.put_along_axis(
            rank, base, (np.arange(k, dtype=kdt) << np.array(shift, dtype=kdt))[None, :], axis=1
        )
        by_round = np.ascontiguousarray(base.T.astype(np.min_scalar_type(k - 1)))
        found = _tables[(k, seed)] = _Orders(by_round, np.concatenate([rank, rank], axis=1), shift)
    return found


def _by_table(
    h: np.ndarray,
    base: np.ndarray,
    rot: np.ndarray,
    offsets: np.ndarray,
    sig: np.ndarray,
    docs: np.ndarray,
    tab: _Orders,
) -> None:
    """Signatures of ``docs`` (short documents): per bin, the shingle of smallest (place
    of the bin in its order, place in hash order). Documents of about one length go
    together (:func:`_width`), each row padded to the group's width with places that
    never win (a group per length cost more in calls than in work)."""
    k = sig.shape[1]
    windows = np.lib.stride_tricks.sliding_window_view(tab.keys, k, axis=1)
    lengths = offsets[docs + 1] - offsets[docs]
    widths = _width(lengths)
    mask = tab.keys.dtype.type((1 << tab.shift) - 1)
    for w in distinct(widths).tolist():
        group, glen = docs[widths == w], lengths[widths == w]
        place = np.arange(w, dtype=tab.keys.dtype)[None, :, None]
        step = max(1, CHUNK // (w * k))
        for lo in range(0, len(group), step):
            part, n = group[lo : lo + step], glen[lo : lo + step, None]
            pad = np.arange(w) >= n  # past the document's end: sorted last, never chosen
            at = offsets[part][:, None] + np.minimum(np.arange(w), n - 1)
            hh = np.where(pad, EMPTY, h[at])
            # rows in hash order
            at = np.take_along_axis(at, np.argsort(hh, axis=1, kind="stable"), axis=1)
            key = windows[base[at], k - rot[at]]  # (documents, width, bins)
            key |= place
            key[pad] = np.iinfo(key.dtype).max
            best = (key.min(axis=1) & mask).astype(np.intp)
            sig[part] = h[np.take_along_axis(at, best, axis=1)] >> np.uint64(tab.shift)


def _width(lengths: np.ndarray) -> np.ndarray:
    """The padded width of documents of ``lengths`` shingles: exact up to 8, then in
    steps of an eighth of the next power of two (at most a quarter more work, ~24
    widths up to 128)."""
    step = np.left_shift(1, np.maximum(0, _bit_length(np.maximum(lengths, 1) - 1) - 3))
    return -(-lengths // step) * step


def _bit_length(x: np.ndarray) -> np.ndarray:
    """The bit length of each non-negative integer of ``x`` (exact below 2**52)."""
    return np.where(x > 0, np.frexp(x.astype(np.float64))[1], 0)


def _by_rounds(
    h: np.ndarray,
    base: np.ndarray,
    rot: np.ndarray,
    offsets: np.ndarray,
    sig: np.ndarray,
    chosen: np.ndarray,
    tab: _Orders,
) -> None:
    """Signatures of the ``chosen`` documents (long ones): each shingle fills its first
    bin (round 0), then in round ``t`` visits its ``t``-th bin, where a still-empty bin
    takes the smallest hash among the round's visitors. Rounds go in blocks (1, 2, 4,
    ...): a bin takes the smallest (round, hash) offered in a block, which no later round
    can beat, so visits to finished documents change nothing (their shingles are dropped
    once a fifth of the documents is done). Ends by round ``k``, when every shingle has
    visited every bin."""
    docs = np.flatnonzero(chosen)
    if not len(docs):
        return
    k = sig.shape[1]
    counts = offsets[docs + 1] - offsets[docs]
    if len(docs) < len(offsets) - 1:
        mine = np.repeat(chosen, np.diff(offsets))
        h, base, rot = h[mine], base[mine], rot[mine]
    v = h >> np.uint64(tab.shift)
    rows = np.arange(len(docs))
    cell0 = np.repeat(rows * k, counts)
    sub = np.full((len(docs), k), EMPTY, dtype=np.uint64)
    flat = sub.reshape(-1)
    np.minimum.at(flat, cell0 + _rotate(tab.by_round[0][base], rot, k), v)
    t, block = 1, 1
    while t < k:
        live = (sub[rows] == EMPTY).any(axis=1)
        if not live.any():
            break
        if 5 * live.sum() < 4 * len(rows):  # drop the shingles of finished documents
            keep = np.repeat(live, counts)
            v, base, rot, cell0 = v[keep], base[keep], rot[keep], cell0[keep]
            rows, counts = rows[live], counts[live]
        stop = min(k, t + block)
        bins = _rotate(np.take(tab.by_round[t:stop], base, axis=1), rot, k)  # (rounds, shingles)
        cell = bins + cell0
        rounds = np.arange(t, stop, dtype=np.uint64)[:, None] << np.uint64(64 - tab.shift)
        np.minimum.at(flat, cell.ravel(), (rounds | v).ravel())
        t, block = stop, 2 * block
    sub &= np.uint64((1 << (64 - tab.shift)) - 1)
    sig[docs] = sub


def _rotate(bins: np.ndarray, rot: np.ndarray, k: int) -> np.ndarray:
    """``(bins + rot) % k`` for ``bins, rot < k``, in 16-bit integers: where the sum is
    ``k`` or more, subtracting ``k`` makes it smaller; elsewhere it wraps around to more."""
    out = bins + rot
    return np.minimum(out, out - np.uint16(k), out=out)
