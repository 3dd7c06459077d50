"""Packing documents into sequences, and sequences into batch arrays: every token once,
boundaries, positions, labels, counts and split documents."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import ConfigError
from shardwise.plan.packing import PACKINGS, count_sequences, pack
from shardwise.plan.sequences import IGNORE, fill_batch, sequence_tokens
from shardwise.plan.tokenstats import split_documents

SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# empty, single-token, around seq_len and much longer documents
LENGTHS = st.lists(
    st.one_of(st.sampled_from([0, 1, 2]), st.integers(0, 40), st.integers(30, 130)), max_size=30
)


@SETTINGS
@given(lengths=LENGTHS, seq_len=st.integers(1, 33), packing=st.sampled_from(PACKINGS))
def test_every_token_in_exactly_one_sequence(
    lengths: list[int], seq_len: int, packing: str
) -> None:
    p = pack(np.array(lengths, dtype=np.int64), seq_len, packing, buffer=7)
    seen = [np.zeros(n, dtype=np.int64) for n in lengths]
    for d, s, n in zip(p.doc.tolist(), p.start.tolist(), p.length.tolist()):
        assert n >= 1
        seen[d][s : s + n] += 1
    assert all((x == 1).all() for x in seen)
    filled = p.filled()
    assert (filled >= 1).all() and (filled <= seq_len).all()
    assert filled.sum() == sum(lengths)
    assert p.split_docs() == int(
        split_documents(np.array(lengths), [len(lengths)], seq_len, packing).sum()
    )
    if packing == "concat":  # full sequences but the last
        assert (filled[:-1] == seq_len).all()
        assert p.num_sequences == -(-sum(lengths) // seq_len)
    if packing == "pad":  # one document per sequence
        assert all(len(set(p.doc[p.pieces(k)].tolist())) == 1 for k in range(p.num_sequences))
    if packing != "concat":  # only documents longer than seq_len are split
        for d, n in enumerate(lengths):
            assert (p.doc == d).sum() == (-(-n // seq_len) if n > seq_len else int(n > 0))


@SETTINGS
@given(
    units=st.lists(LENGTHS, min_size=1, max_size=6),
    seq_len=st.integers(1, 33),
    packing=st.sampled_from(PACKINGS),
)
def test_counts_per_unit_match_the_packing(
    units: list[list[int]], seq_len: int, packing: str
) -> None:
    flat = np.array([n for u in units for n in u], dtype=np.int64)
    counts = count_sequences(flat, np.array([len(u) for u in units]), seq_len, packing, 5)
    assert counts.tolist() == [
        pack(np.array(u, np.int64), seq_len, packing, 5).num_sequences for u in units
    ]
    split = split_documents(flat, np.array([len(u) for u in units]), seq_len, packing)
    assert int(split.sum()) == sum(
        pack(np.array(u, np.int64), seq_len, packing, 5).split_docs() for u in units
    )


def test_best_fit_fills_the_fullest_sequence_that_fits() -> None:
    p = pack(np.array([6, 3, 5, 4, 2]), 10, "best_fit")
    # decreasing: 6 -> A, 5 -> B, 4 -> A (room 4 exactly), 3 -> B, 2 -> B
    assert [sorted(p.doc[p.pieces(k)].tolist()) for k in range(p.num_sequences)] == [
        [0, 3],
        [1, 2, 4],
    ]


@SETTINGS
@given(lengths=LENGTHS, seq_len=st.integers(2, 33), packing=st.sampled_from(PACKINGS))
def test_batch_arrays_have_positions_labels_and_boundaries(
    lengths: list[int], seq_len: int, packing: str
) -> None:
    lengths_arr = np.array(lengths, dtype=np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths_arr)])
    tokens = np.arange(int(offsets[-1]), dtype=np.uint16) % 997 + 3
    p = pack(lengths_arr, seq_len, packing, buffer=4)
    seqs = [sequence_tokens(tokens, offsets, p, k) for k in range(p.num_sequences)]
    if not seqs:
        return
    b = fill_batch(seqs, seq_len, pad_id=1)
    got: list[int] = []
    for k in range(p.num_sequences):
        mask = b["loss_mask"][k]
        n = int(mask.sum())
        assert mask[:n].all() and not mask[n:].any()
        assert (b["input_ids"][k, n:] == 1).all() and (b["document_ids"][k, n:] == -1).all()
        for j, (d, s, m) in enumerate(zip(*(x[p.pieces(k)] for x in (p.doc, p.start, p.length)))):
            at = np.flatnonzero(b["document_ids"][k] == j)
            assert len(at) == m
            assert (
                b["input_ids"][k, at].tolist()
                == tokens[offsets[d] + s : offsets[d] + s + m].tolist()
            )
            assert b["position_ids"][k, at].tolist() == list(range(m))  # restart per document
            assert b["labels"][k, at[:-1]].tolist() == b["input_ids"][k, at[1:]].tolist()
            assert b["labels"][k, at[-1]] == IGNORE
        assert (b["labels"][k, n:] == IGNORE).all()
        got.extend(b["input_ids"][k, :n].tolist())
    assert sorted(got) == sorted(tokens.tolist())
    cu = b["cu_seqlens"]
    assert cu[0] == 0 and cu[-1] == len(seqs) * seq_len and (np.diff(cu) > 0).all()
    assert len(cu) - 1 == len(p.length) + int((b["loss_mask"].sum(1) < seq_len).sum())


def test_bad_arguments() -> None:
    with pytest.raises(ConfigError, match="packing"):
        pack(np.array([1]), 4, "first_fit")
    with pytest.raises(ConfigError, match="seq_len"):
        pack(np.array([1]), 0)
    with pytest.raises(ConfigError, match="lengths"):
        pack(np.array([-1]), 4)
    with pytest.raises(ConfigError, match="units hold"):
        count_sequences(np.array([1, 2]), np.array([1]), 4)
