"""LSH banding: choosing bands x rows for a threshold, and band hashes of signatures."""

from __future__ import annotations

import bisect

import numpy as np

from shardwise.errors import ConfigError

__all__ = [
    "band_hashes",
    "bucket_order",
    "maybe_shared",
    "optimal_bands",
    "partition_records",
    "recall_bands",
]


def _prob(s: np.ndarray, b: int, r: int) -> np.ndarray:
    """Probability that two documents of similarity ``s`` share at least one band."""
    return 1.0 - (1.0 - s**r) ** b


def optimal_bands(
    threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5
) -> tuple[int, int]:
    """``(bands, rows)`` with ``bands * rows <= num_perm`` minimising the weighted area of
    false positives (similarity below ``threshold`` becoming candidates) and false
    negatives (similarity above it missed)."""
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
    lo = np.linspace(0.0, threshold, 201)
    hi = np.linspace(threshold, 1.0, 201)
    best, best_cost = (1, num_perm), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = np.trapezoid(_prob(lo, b, r), lo)
            fn = np.trapezoid(1.0 - _prob(hi, b, r), hi)
            cost = fp_weight * fp + fn_weight * fn
            if cost < best_cost:
                best, best_cost = (b, r), cost
    return best


def recall_bands(threshold: float, num_perm: int, min_recall: float = 0.99) -> tuple[int, int]:
    """``(bands, rows)`` for runs that verify candidates exactly, where a false positive
    costs a check and a false negative a missed duplicate: among the choices that make a
    pair a candidate with probability at least ``min_recall`` on average over
    similarities uniform in ``[threshold, 1]`` (the expected recall of the pairs to
    find), the one with the fewest false-positive candidates (the smallest area under
    the S-curve below ``threshold``). For each ``rows`` only its fewest sufficient bands
    are a choice: more bands only add candidates (and bucket records, which cost time
    in proportion to bands). ``(0.8, 128)`` gives 15 x 8."""
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
    lo = np.linspace(0.0, threshold, 201)
    hi = np.linspace(threshold, 1.0, 201)
    best, best_fp = (num_perm, 1), float("inf")
    for r in range(1, num_perm + 1):

        def enough(b: int, r: int = r) -> bool:
            return float(np.trapezoid(_prob(hi, b, r), hi)) / (1.0 - threshold) >= min_recall

        if not enough(num_perm // r):
            continue
        b = (
            bisect.bisect_left(range(1, num_perm // r + 1), True, key=enough) + 1
        )  # recall grows with bands
        fp = float(np.trapezoid(_prob(lo, b, r), lo))
        if fp < best_fp:
            best, best_fp = (b, r), fp
    return best


def band_hashes(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n_docs, bands)`` uint64 hashes of each band's ``rows`` signature values (all
    bands at once, one pass per row of a band)."""
    n = sig.shape[0]
    start = np.array(
        [((b + 1) * 0xD6E8FEB86659FD93) & 0xFFFFFFFFFFFFFFFF for b in range(bands)], dtype=np.uint64
    )
    h = np.repeat(start[None, :], n, axis=0)
    by_band = sig[:, : bands * rows].reshape(n, bands, rows)
    mult = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for j in range(rows):
            h ^= by_band[:, :, j]
            h *= mult
            h ^= h >> np.uint64(29)
    return h


def partition_records(
    bands: np.ndarray, ids: np.ndarray, parts: int
) -> tuple[np.ndarray, np.ndarray]:
    """The ``(band, hash, doc)`` records of documents ``ids`` (row ``i`` of ``bands``: the
    band hashes of ``ids[i]``), ordered by hash partition (``hash % parts``), each
    partition's in document order; and where each partition's records start (``parts + 1``
    bounds)."""
    b = bands.shape[1]
    band = np.broadcast_to(np.arange(b, dtype=np.uint64), bands.shape).ravel()
    hh = bands.ravel()
    doc = np.repeat(ids, b)
    part = (hh % np.uint64(parts)).astype(np.min_scalar_type(parts))
    order = np.argsort(
        part, kind="stable"
    )  # a radix sort: each partition's records in document order
    rec = np.stack([band[order], hh[order], doc[order]], axis=1)
    return rec, np.concatenate([[0], np.cumsum(np.bincount(part, minlength=parts))])


def maybe_shared(h: np.ndarray) -> np.ndarray:
    """A mask of the hashes ``h`` that may occur more than once (every repeated one does;
    about one in eight of the others too): their top bits counted in about 8 bins per
    hash (at most 2**22). A bucket of one document yields no pair, so the buckets are
    sorted out of these alone, a fraction of all records on most corpora."""
    if len(h) < 2:
        return np.zeros(len(h), dtype=bool)
    bits = min(22, max(8, (len(h) - 1).bit_length() + 3))
    bins = (h >> np.uint64(64 - bits)).astype(np.intp)
    return np.bincount(bins, minlength=1 << bits)[bins] > 1


def bucket_order(rec: np.ndarray) -> np.ndarray:
    """The order of ``(band, hash, doc)`` records by bucket, each bucket's documents in
    order. Records come in document order (tasks in order, each task's rows in order), so
    a stable sort by hash alone does it unless two bands share a hash value (a band's
    hash depends on the band: almost never; then a sort by all three)."""
    order = np.argsort(rec[:, 1], kind="stable")
    h, band = rec[order, 1], rec[order, 0]
    if ((h[1:] == h[:-1]) & (band[1:] != band[:-1])).any() or (
        np.diff(rec[:, 2].view(np.int64)) < 0
    ).any():
        order = np.lexsort((rec[:, 2], rec[:, 1], rec[:, 0]))
    return order
