"""LSH helpers: band hashes of all bands at once, and the filter that leaves buckets of
one document out of the sort."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.dedup.lsh import band_hashes, maybe_shared


def _band_reference(sig: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """One band and one row at a time (the definition)."""
    out = np.zeros((sig.shape[0], bands), dtype=np.uint64)
    mult = np.uint64(0x9E3779B97F4A7C15)
    with np.errstate(over="ignore"):
        for b in range(bands):
            h = np.full(
                sig.shape[0], np.uint64(((b + 1) * 0xD6E8FEB86659FD93) & 0xFFFFFFFFFFFFFFFF)
            )
            for j in range(rows):
                h = (h ^ sig[:, b * rows + j]) * mult
                h ^= h >> np.uint64(29)
            out[:, b] = h
    return out


@given(st.integers(0, 40), st.integers(1, 9), st.integers(1, 9), st.integers(0, 2**32))
@settings(max_examples=60, deadline=None)
def test_band_hashes_equal_the_per_band_definition(
    n: int, bands: int, rows: int, seed: int
) -> None:
    sig = np.random.default_rng(seed).integers(
        0, 2**64 - 1, size=(n, bands * rows + 3), dtype=np.uint64
    )
    assert np.array_equal(band_hashes(sig, bands, rows), _band_reference(sig, bands, rows))


@given(st.lists(st.integers(0, 2**64 - 1) | st.integers(0, 40), max_size=300))
@settings(max_examples=200, deadline=None)
def test_maybe_shared_flags_every_repeated_hash(values: list[int]) -> None:
    """Every hash that occurs more than once is flagged (others may be, by their bin)."""
    h = np.array(values, dtype=np.uint64)
    flagged = maybe_shared(h)
    _, inverse, counts = np.unique(h, return_inverse=True, return_counts=True)
    assert flagged.shape == h.shape
    assert flagged[counts[inverse] > 1].all()


def test_maybe_shared_leaves_most_unique_hashes_out() -> None:
    h = np.random.default_rng(0).integers(0, 2**64 - 1, size=100_000, dtype=np.uint64)
    h[:1000] = h[1000:2000]  # 1,000 hashes repeated
    flagged = maybe_shared(h)
    assert flagged[:2000].all()
    assert flagged.sum() < 2000 + 0.2 * len(h)
