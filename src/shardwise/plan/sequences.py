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


def _empty(b: int, seq_len: int, pad_id: int) -> dict[str, np.ndarray]:
    return {
        "input_ids": np.full((b, seq_len), pad_id, dtype=np.int64),
        "labels": np.full((b, seq_len), IGNORE, dtype=np.int64),
        "position_ids": np.zeros((b, seq_len), dtype=np.int64),
        "document_ids": np.full((b, seq_len), -1, dtype=np.int64),
        "loss_mask": np.zeros((b, seq_len), dtype=bool),
    }


def fill_batch(
    sequences: Sequence[tuple[np.ndarray, np.ndarray]], seq_len: int, pad_id: int = 0
) -> dict[str, np.ndarray]:
    """The batch of ``sequences``, each ``(tokens, piece lengths)`` from
    :func:`sequence_tokens` (see the module docstring for the arrays)."""
    out = _empty(len(sequences), seq_len, pad_id)
    segments = [0]
    for i, (ids, lengths) in enumerate(sequences):
        n = len(ids)
        out["input_ids"][i, :n] = ids
        out["loss_mask"][i, :n] = True
        first = np.cumsum(lengths) - lengths
        piece = np.repeat(np.arange(len(lengths)), lengths)
        out["position_ids"][i, :n] = np.arange(n) - first[piece]
        out["document_ids"][i, :n] = piece
        nxt = np.arange(1, n + 1)
        same = np.zeros(n, dtype=bool)
        same[:-1] = piece[1:] == piece[:-1]
        out["labels"][i, :n][same] = ids[nxt[same]]
        base = i * seq_len
        segments.extend((base + first + lengths).tolist())
        if n < seq_len:
            segments.append(base + seq_len)
    out["cu_seqlens"] = np.asarray(segments, dtype=np.int32)
    return out
