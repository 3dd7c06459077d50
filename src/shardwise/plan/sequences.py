"""Sequences as arrays (pure numpy): the batch a token stream yields.

For a batch of ``B`` sequences of ``seq_len`` tokens (:func:`fill_batch`):

- ``input_ids`` ``[B, seq_len]``: the sequence's pieces back to back, then ``pad_id``;
- ``labels`` ``[B, seq_len]``: ``input_ids`` shifted left by one *inside each piece*, and
  ``-100`` at a piece's last token and on padding (the next token belongs to another
  document, or to the next piece of a split document): next-token targets with no
  prediction across a document boundary, at ``seq_len`` (not ``seq_len + 1``) tokens;
- ``position_ids`` ``[B, seq_len]``: ``0, 1, ...`` restarting at each piece; 0 on padding;
- ``document_ids`` ``[B, seq_len]``: the piece's number inside its sequence; -1 on padding;
- ``loss_mask`` ``[B, seq_len]``: True on tokens, False on padding;
- ``cu_seqlens`` ``[n + 1]`` int32: boundaries of the batch's pieces in the flattened
  ``[B * seq_len]`` tokens, each sequence's padding one more segment (the layout of
  variable-length attention kernels).

A sequence's tokens are one gather (a slice copy when its pieces are contiguous, as in
``concat``) out of its unit's flat token array.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from shardwise.plan.packing import Packed

__all__ = ["IGNORE", "fill_batch", "sequence_tokens"]

IGNORE = -100  # label of positions without a target


def sequence_tokens(
    tokens: np.ndarray, offsets: np.ndarray, packed: Packed, k: int
) -> tuple[np.ndarray, np.ndarray]:
    """The tokens of sequence ``k`` of a unit (flat ``tokens``, document ``offsets``) and
    the lengths of its pieces."""
    sl = packed.pieces(k)
    lengths = packed.length[sl]
    src = offsets[packed.doc[sl]] + packed.start[sl]
    if len(src) == 1 or (src[1:] == src[:-1] + lengths[:-1]).all():
        a = int(src[0])
        return tokens[a : a + int(lengths.sum())], lengths
    starts = np.repeat(src - np.cumsum(lengths) + lengths, lengths)
    return tokens[starts + np.arange(int(lengths.sum()))], lengths


def fill_batch(
    sequences: Sequence[tuple[np.ndarray, np.ndarray]], seq_len: int, pad_id: int = 0
) -> dict[str, np.ndarray]:
    """The batch of ``sequences``, each ``(tokens, piece lengths)`` from
    :func:`sequence_tokens` (see the module docstring for the arrays). Vectorised over
    the whole batch: a handful of array operations per batch, none per token."""
    b = len(sequences)
    lengths = np.concatenate([p for _, p in sequences]).astype(np.int64)
    per_seq = np.fromiter((len(p) for _, p in sequences), np.int64, b)
    tokens = np.concatenate([t for t, _ in sequences], dtype=np.int64)
    seq_of = np.repeat(np.arange(b, dtype=np.int64), per_seq)
    first_piece = np.cumsum(per_seq) - per_seq
    starts = np.cumsum(lengths) - lengths  # each piece's first token among the batch's tokens
    within = starts - np.repeat(starts[first_piece], per_seq)  # ... inside its sequence
    flat_start = seq_of * seq_len + within
    n, m = b * seq_len, len(tokens)
    full = m == n  # every sequence full: the tokens are the flat batch as they are
    at = slice(None) if full else np.repeat(flat_start - starts, lengths) + np.arange(m)
    ids = tokens if full else _scatter(n, pad_id, at, tokens)
    pos = _scatter(n, 0, at, np.arange(m) - np.repeat(starts, lengths), full)
    number = np.arange(len(lengths)) - np.repeat(first_piece, per_seq)  # piece in its sequence
    doc = _scatter(n, -1, at, np.repeat(number, lengths), full)
    targets = np.empty(m, dtype=np.int64)
    targets[:-1] = tokens[1:]
    targets[starts + lengths - 1] = IGNORE  # a piece's last token has no target
    labels = _scatter(n, IGNORE, at, targets, full)
    mask = np.ones(n, dtype=bool) if full else _scatter(n, False, at, True)
    shape = (b, seq_len)
    return {
        "input_ids": ids.reshape(shape),
        "labels": labels.reshape(shape),
        "position_ids": pos.reshape(shape),
        "document_ids": doc.reshape(shape),
        "loss_mask": mask.reshape(shape),
        "cu_seqlens": _cu_seqlens(flat_start, lengths, per_seq, seq_len),
    }


def _scatter(n: int, fill: object, at: Any, values: Any, full: bool = False) -> np.ndarray:
    """``values`` placed at ``at`` of ``n`` slots holding ``fill`` (``values`` as they are
    when the batch is ``full``)."""
    if full:
        return np.asarray(values, dtype=np.int64)
    dtype = bool if isinstance(fill, bool) else np.int64
    out = np.full(n, fill, dtype=dtype)
    out[at] = values
    return out


def _cu_seqlens(
    flat_start: np.ndarray, lengths: np.ndarray, per_seq: np.ndarray, seq_len: int
) -> np.ndarray:
    """Piece ends in the flat batch, plus each padded sequence's end."""
    ends = flat_start + lengths
    last = np.cumsum(per_seq) - 1
    seq_ends = np.arange(1, len(per_seq) + 1, dtype=np.int64) * seq_len
    padded = seq_ends[ends[last] < seq_ends]
    return np.concatenate([[0], np.sort(np.concatenate([ends, padded]))]).astype(np.int32)
