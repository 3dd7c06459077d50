"""What a packing does to each source (pure numpy, vectorised over documents): tokens,
sequences, padding and split documents, without packing a single unit."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from shardwise.plan.tokens import TokenPlan

__all__ = ["split_documents", "token_stats"]


def split_documents(
    lengths: np.ndarray, docs_per_unit: np.ndarray, seq_len: int, packing: str
) -> np.ndarray:
    """True for each document the packing cuts into more than one piece: in ``concat``
    those crossing a multiple of ``seq_len`` counted from their unit's start, else those
    longer than ``seq_len``."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if packing != "concat":
        return lengths > seq_len
    ends = np.cumsum(lengths)
    unit_of = np.repeat(np.arange(len(docs_per_unit)), docs_per_unit)
    unit_start = np.concatenate([[0], ends])[np.concatenate([[0], np.cumsum(docs_per_unit)])]
    a = ends - lengths - unit_start[unit_of]
    split: np.ndarray = (lengths > 0) & ((a + lengths - 1) // seq_len > a // seq_len)
    return split


def _by_source(values: np.ndarray, bounds: Sequence[int]) -> list[int]:
    c = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return [int(c[b] - c[a]) for a, b in itertools.pairwise(bounds)]


def token_stats(plan: TokenPlan) -> list[dict[str, Any]]:
    """Per source (one entry without mixing): documents, tokens, sequences and padding of
    one pass over its data, documents split and their share, and the epoch's sequences
    and token positions (its quota, ``seq_len`` per sequence)."""
    bounds = list(plan.mixing.bounds) if plan.mixing else [0, len(plan.docs)]
    unit_tokens = np.diff(np.concatenate([[0], np.cumsum(plan.lengths)])[plan.doc_ends])
    split = split_documents(plan.lengths, plan.docs, plan.seq_len, plan.packing)
    doc_bounds = [int(plan.doc_ends[b]) for b in bounds]
    docs, tokens = _by_source(plan.docs, bounds), _by_source(unit_tokens, bounds)
    seqs, splits = _by_source(plan.counts, bounds), _by_source(split, doc_bounds)
    epoch = plan.source_sequences()
    out = []
    for s in range(len(bounds) - 1):
        room = seqs[s] * plan.seq_len
        out.append(
            {
                "documents": docs[s],
                "tokens": tokens[s],
                "sequences": seqs[s],
                "padding_tokens": room - tokens[s],
                "padding_share": (room - tokens[s]) / room if room else 0.0,
                "split_documents": splits[s],
                "split_share": splits[s] / docs[s] if docs[s] else 0.0,
                "epoch_sequences": epoch[s],
                "epoch_tokens": epoch[s] * plan.seq_len,
            }
        )
    return out
