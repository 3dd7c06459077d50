"""MinHash signatures of whole batches of shingle sets, vectorised in numpy.

``num_perm`` values per document (``k`` below), two schemes:

- ``"oph"`` (default): one-permutation hashing, densified by each shingle's own order of
  the bins (:mod:`shardwise.dedup.oph`). Every shingle is hashed once; the fraction of equal
  positions estimates the Jaccard similarity without bias, with no more spread than ``k``
  independent permutations.
- ``"perm"``: classic MinHash, the minimum of ``k`` multiply-shift hashes of every shingle
  (``k`` hashes per shingle), for comparison with other tools.
"""

from __future__ import annotations

import numpy as np

from shardwise.dedup.oph import CHUNK, EMPTY, one_permutation
from shardwise.dedup.sets import distinct
from shardwise.dedup.shingles import _mix
from shardwise.errors import ConfigError

__all__ = ["EMPTY", "MAX_PERM", "signatures"]

MAX_PERM = 1 << 15  # bins and rotations add up in 16 bits


def signatures(
    shingles: np.ndarray,
    offsets: np.ndarray,
    *,
    num_perm: int = 128,
    seed: int = 0,
    scheme: str = "oph",
) -> np.ndarray:
    """MinHash signatures of the shingle sets of many documents.

    Args:
        shingles: 64-bit shingle hashes of every document, concatenated (repeats allowed).
        offsets: ``n_docs + 1`` offsets into ``shingles`` delimiting each document's.
        num_perm: values per signature (1 to 32,768, not only powers of two).
        seed: selects the hash functions (and the bin orders).
        scheme: ``"oph"`` (one-permutation hashing, densified) or ``"perm"`` (classic).

    Returns:
        ``(n_docs, num_perm)`` uint64 values; rows of empty documents are all ``EMPTY``.
        A row depends only on the document's shingle set (and ``num_perm``, ``seed``,
        ``scheme``); the fraction of equal positions of two rows estimates the Jaccard
        similarity of the two sets.

    Raises:
        ValueError: for an unknown ``scheme`` or ``num_perm`` out of range.
    """
    if scheme not in ("oph", "perm"):
        raise ConfigError(f"scheme must be 'oph' or 'perm', got {scheme!r}")
    if not 1 <= num_perm <= MAX_PERM:
        raise ConfigError(f"num_perm must be in [1, {MAX_PERM}], got {num_perm}")
    offsets = np.asarray(offsets, dtype=np.int64)
    sig = np.full((len(offsets) - 1, num_perm), EMPTY, dtype=np.uint64)
    if len(shingles):
        shingles = np.asarray(shingles, dtype=np.uint64)
        (one_permutation if scheme == "oph" else _permutations)(shingles, offsets, sig, seed)
    return sig


def _permutations(shingles: np.ndarray, offsets: np.ndarray, sig: np.ndarray, seed: int) -> None:
    """``"perm"``: the minimum of ``num_perm`` multiply-shift hashes of each shingle, over
    chunks of whole documents of about ``CHUNK / num_perm`` shingles."""
    k = sig.shape[1]
    rng = np.random.default_rng([seed, 0x5045524D])
    a = np.asarray(rng.integers(1, 2**63, size=k, dtype=np.uint64))
    a |= np.uint64(1)
    b = rng.integers(0, 2**63, size=k, dtype=np.uint64)
    x = _mix(shingles)
    nonempty = np.flatnonzero(np.diff(offsets) > 0)
    starts = offsets[nonempty]
    cuts = distinct(np.searchsorted(starts, np.arange(0, len(shingles), max(1, CHUNK // k))))
    bounds = np.append(cuts[cuts < len(nonempty)], len(nonempty))
    for c0, c1 in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
        lo, hi = starts[c0], offsets[nonempty[c1 - 1] + 1]
        m = (x[lo:hi, None] * a[None, :] + b) >> np.uint64(16)
        sig[nonempty[c0:c1]] = np.minimum.reduceat(m, starts[c0:c1] - lo, axis=0)
