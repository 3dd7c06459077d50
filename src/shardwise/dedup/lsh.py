"""LSH banding: choosing bands x rows for a threshold, and band hashes of signatures."""

from __future__ import annotations

import numpy as np

from shardwise.errors import ConfigError

__all__ = ["band_hashes", "optimal_bands", "recall_bands"]


def _prob(s: np.ndarray, b: int, r: int) -> np.ndarray:
    """Probability that two documents of similarity ``s`` share at least one band."""
    return 1.0 - (1.0 - s**r) ** b


def optimal_bands(threshold: float, num_perm: int, fp_weight: float = 0.5,
                  fn_weight: float = 0.5) -> tuple[int, int]:
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


def recall_bands(threshold: float, num_perm: int, min_recall: float = 0.98) -> tuple[int, int]:
    """``(bands, rows)`` for runs that verify candidates exactly (false positives cost only
    time): the fewest false-positive candidates among the choices that make a pair of
    similarity ``threshold`` a candidate with probability at least ``min_recall``."""
    if not 0.0 < threshold < 1.0:
        raise ConfigError(f"threshold must be in (0, 1), got {threshold}")
    lo = np.linspace(0.0, threshold, 201)
    best, best_fp = None, float("inf")
    for r in range(1, num_perm + 1):
        b = num_perm // r  # all the permutations: more bands only raise recall
        if _prob(np.array(threshold), b, r) < min_recall:
            continue
        fp = float(np.trapezoid(_prob(lo, b, r), lo))
        if fp < best_fp:
            best, best_fp = (b, r), fp
    return best if best is not None else (num_perm, 1)


def band_hashes(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """``(n_docs, bands)`` uint64 hashes of each band's ``rows`` signature values."""
    n = sig.shape[0]
    out = np.zeros((n, bands), dtype=np.uint64)
    mult = np.uint64(0x9E3779B97F4A7C15)
    for b in range(bands):
        h = np.full(n, np.uint64(((b + 1) * 0xD6E8FEB86659FD93) & 0xFFFFFFFFFFFFFFFF), dtype=np.uint64)
        for j in range(rows):
            h = (h ^ sig[:, b * rows + j]) * mult
            h ^= h >> np.uint64(29)
        out[:, b] = h
    return out
