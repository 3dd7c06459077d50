"""MinHash signatures: short documents estimate Jaccard like classic MinHash, a row
depends on the shingle set alone, both ways of computing ``"oph"`` agree, edge cases."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import shardwise.dedup.oph as oph_module
from shardwise.dedup.signatures import EMPTY, signatures


def _batch(docs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated shingles and offsets of ``docs``."""
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    shingles = np.concatenate(docs).astype(np.uint64) if docs else np.zeros(0, np.uint64)
    return shingles, offsets


def _pairs(
    rng: np.random.Generator, n_pairs: int, max_size: int
) -> tuple[list[np.ndarray], np.ndarray]:
    """Pairs of shingle sets of known Jaccard similarity: a union of 1 to ``2 * max_size``
    random hashes, cut into a shared part and each side's own part."""
    docs: list[np.ndarray] = []
    exact = np.empty(n_pairs)
    for i in range(n_pairs):
        union = int(rng.integers(1, 2 * max_size + 1))
        shared = int(rng.integers(0, union + 1))
        only_a = int(rng.integers(0, union - shared + 1))
        el = rng.integers(0, 2**64, size=union, dtype=np.uint64)
        docs += [el[: shared + only_a], np.concatenate([el[:shared], el[shared + only_a :]])]
        exact[i] = shared / union
    return docs, exact


@given(
    seed=st.integers(0, 2**32 - 1),
    num_perm=st.sampled_from([64, 100, 128, 256]),
    max_size=st.integers(1, 40),
)
@settings(max_examples=40, deadline=None, derandomize=True)
def test_short_documents_estimate_jaccard_like_classic_minhash(
    seed: int, num_perm: int, max_size: int
) -> None:
    """On 400 pairs of short documents (1 to 80 shingles in the union), the fraction of
    equal positions is exact for equal and disjoint sets, every other pair is within 4
    standard deviations of classic MinHash (sqrt(J(1-J)/num_perm)) plus two positions,
    there is no bias, and the spread is no larger than classic MinHash's own."""
    docs, exact = _pairs(np.random.default_rng(seed), 400, max_size)
    shingles, offsets = _batch(docs)
    inner = (exact > 0) & (exact < 1)
    sd = np.sqrt(exact * (1 - exact) / num_perm)[inner]
    spread = {}
    for scheme in ("oph", "perm"):
        sig = signatures(shingles, offsets, num_perm=num_perm, seed=seed % 1000, scheme=scheme)
        est = (sig[0::2] == sig[1::2]).mean(axis=1)
        assert (est[exact == 1] == 1).all() and (est[exact == 0] == 0).all(), scheme
        z = (est - exact)[inner] / sd
        assert abs(z.mean()) < 0.35, scheme
        spread[scheme] = float(np.sqrt((z**2).mean()))
        if scheme == "oph":
            assert (np.abs(est - exact)[inner] <= 4 * sd + 2 / num_perm).all()
    assert spread["oph"] <= min(1.0, spread["perm"]), spread


@contextmanager
def _table_up_to(ratio: float) -> Iterator[None]:
    """Route documents of up to ``ratio * num_perm`` shingles through the rank table."""
    saved = oph_module._TABLE_UP_TO
    oph_module._TABLE_UP_TO = ratio
    try:
        yield
    finally:
        oph_module._TABLE_UP_TO = saved


@given(
    lengths=st.lists(st.integers(0, 400), min_size=1, max_size=25),
    num_perm=st.sampled_from([1, 2, 3, 7, 64, 100, 128, 256, 257, 1000]),
    seed=st.integers(0, 2**16),
    vocabulary=st.integers(1, 600),
)
@settings(max_examples=60, deadline=None, derandomize=True)
def test_table_and_rounds_give_the_same_values(
    lengths: list[int], num_perm: int, seed: int, vocabulary: int
) -> None:
    """Short documents go by the rank table and long ones by rounds; forcing either way on
    every document (repeated shingles included) gives the same signatures."""
    rng = np.random.default_rng(seed)
    pool = rng.integers(0, 2**64, size=vocabulary, dtype=np.uint64)
    shingles, offsets = _batch([pool[rng.integers(0, vocabulary, size=n)] for n in lengths])
    with _table_up_to(0.0):
        by_rounds = signatures(shingles, offsets, num_perm=num_perm, seed=seed)
    with _table_up_to(1e9):  # up to 255 shingles (65,535 above 256 bins)
        by_table = signatures(shingles, offsets, num_perm=num_perm, seed=seed)
    default = signatures(shingles, offsets, num_perm=num_perm, seed=seed)
    assert np.array_equal(by_rounds, by_table) and np.array_equal(default, by_table)
    nonempty = np.diff(offsets) > 0
    assert (default[nonempty] != EMPTY).all() and (default[~nonempty] == EMPTY).all()


@given(
    docs=st.lists(st.lists(st.integers(0, 300), max_size=150), min_size=1, max_size=12),
    num_perm=st.sampled_from([5, 64, 128, 130]),
    scheme=st.sampled_from(["oph", "perm"]),
    seed=st.integers(0, 3),
)
@settings(max_examples=60, deadline=None, derandomize=True)
def test_a_row_depends_on_the_shingle_set_only(
    docs: list[list[int]], num_perm: int, scheme: str, seed: int
) -> None:
    """A document's row is the same in any batch, in any shingle order, with repeats, and
    on every call (tables rebuilt included)."""
    salt = np.uint64(0x9E3779B97F4A7C15)
    arrays = [np.array(d, dtype=np.uint64) * salt for d in docs]
    shingles, offsets = _batch(arrays)
    together = signatures(shingles, offsets, num_perm=num_perm, seed=seed, scheme=scheme)
    oph_module._tables.clear()
    rng = np.random.default_rng(len(docs))
    for i, a in enumerate(arrays):
        shuffled = np.concatenate([rng.permutation(a), a[: len(a) // 3]])
        alone = signatures(*_batch([shuffled]), num_perm=num_perm, seed=seed, scheme=scheme)
        assert np.array_equal(alone[0], together[i])


@pytest.mark.parametrize("scheme", ["oph", "perm"])
@pytest.mark.parametrize("num_perm", [1, 3, 7, 100, 128, 257, 1000])
def test_edge_cases(scheme: str, num_perm: int) -> None:
    """No documents, empty documents, one shingle, one shingle repeated, and any
    ``num_perm``: empty rows stay empty, the others are filled everywhere."""
    nothing = np.zeros(0, np.uint64)
    assert signatures(nothing, np.zeros(1, np.int64), num_perm=num_perm).shape == (0, num_perm)
    none = signatures(nothing, np.zeros(4, np.int64), num_perm=num_perm, scheme=scheme)
    assert none.shape == (3, num_perm) and (none == EMPTY).all()
    one, other = np.uint64(12345), np.uint64(67890)
    docs = [
        np.array([], np.uint64),
        np.array([one]),
        np.full(50, one),
        np.array([other]),
        np.array([one, other]),
        np.array([], np.uint64),
    ]
    sig = signatures(*_batch(docs), num_perm=num_perm, scheme=scheme)
    assert (sig[[0, 5]] == EMPTY).all() and (sig[1:5] != EMPTY).all()
    assert np.array_equal(sig[1], sig[2])  # repeats change nothing
    assert (sig[1] != sig[3]).all()  # disjoint sets share no position
    assert ((sig[4] == sig[1]) | (sig[4] == sig[3])).all()  # every bin holds one of the two
    if scheme == "oph":
        assert (sig[1] == sig[1][0]).all()  # a single shingle wins every bin


def test_one_shingle_documents_fill_every_bin_for_every_seed() -> None:
    """Thousands of one-shingle documents (each in some other first bin) under several
    seeds: every bin of every one is filled, and with the same value."""
    shingles = np.random.default_rng(0).integers(0, 2**64, size=3000, dtype=np.uint64)
    for seed in range(4):
        sig = signatures(shingles, np.arange(3001), num_perm=128, seed=seed)
        assert (sig != EMPTY).all() and (sig == sig[:, :1]).all()


def test_seeds_and_bad_arguments() -> None:
    shingles, offsets = _batch([np.arange(1, 40, dtype=np.uint64)])
    a = signatures(shingles, offsets, seed=1)
    assert (a != signatures(shingles, offsets, seed=2)).mean() > 0.9  # other hash functions
    assert np.array_equal(a, signatures(shingles, offsets, seed=1))
    with pytest.raises(ValueError, match="scheme"):
        signatures(shingles, offsets, scheme="bbit")
    for bad in (0, 40_000):
        with pytest.raises(ValueError, match="num_perm"):
            signatures(shingles, offsets, num_perm=bad)


def test_minhash_dedup_refuses_too_many_permutations_when_built() -> None:
    from shardwise.dedup.minhash import MinHashDedup
    from shardwise.errors import ConfigError

    with pytest.raises(ConfigError, match="num_perm in \\[2, 32768\\]"):
        MinHashDedup(column="text", num_perm=40_000)
