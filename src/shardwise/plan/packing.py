"""Packing documents into fixed-length sequences (pure numpy): one unit at a time.

A unit's documents (token lengths ``lengths``, in file order; each already ends with the
tokenizer's EOS when the data was tokenized with one) become sequences of at most
``seq_len`` tokens. A sequence is a list of *pieces*: a run of consecutive tokens of one
document. Every token of the unit is in exactly one piece of one sequence.

- ``"concat"``: the documents joined, cut every ``seq_len`` tokens. Only the unit's last
  sequence may be short (it is padded); a document crossing a cut is split.
- ``"best_fit"``: best-fit decreasing over a buffer of up to ``buffer`` documents at a
  time (Ding et al., 2024, "Fewer Truncations Improve Language Modeling"): a document
  longer than ``seq_len`` gives whole sequences of its first tokens and a remainder; the
  buffer's pieces, longest first, each go into the open sequence with the least room that
  fits it, or a new one. Sequences are padded; only documents longer than ``seq_len`` are
  split.
- ``"pad"``: one document per sequence (a longer one split into several), padded.

Empty documents have no tokens and no pieces. The packing of a unit depends on its
lengths alone (not on the seed or epoch: the epoch's order shuffles whole sequences), so a
plan needs only the number of sequences per unit and a reader packs a unit when it reads it.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

import numpy as np

from shardwise.errors import ConfigError

__all__ = ["PACKINGS", "Packed", "check_packing", "count_sequences", "pack"]

PACKINGS = ("concat", "best_fit", "pad")
DEFAULT_BUFFER = 1024


@dataclass(frozen=True)
class Packed:
    """The sequences of one unit.

    Attributes:
        seq_len: tokens per sequence.
        bounds: sequence ``k`` is pieces ``bounds[k]:bounds[k + 1]``.
        doc: each piece's document (row of the unit).
        start: each piece's first token, counted inside its document.
        length: each piece's tokens.
    """

    seq_len: int
    bounds: np.ndarray
    doc: np.ndarray
    start: np.ndarray
    length: np.ndarray

    @property
    def num_sequences(self) -> int:
        return len(self.bounds) - 1

    def pieces(self, k: int) -> slice:
        """The pieces of sequence ``k``."""
        return slice(int(self.bounds[k]), int(self.bounds[k + 1]))

    def filled(self) -> np.ndarray:
        """Tokens held by each sequence (the rest of its ``seq_len`` is padding)."""
        return _sums(self.length, self.bounds)

    def split_docs(self) -> int:
        """Documents cut into more than one piece."""
        return int((np.bincount(self.doc)[np.unique(self.doc)] > 1).sum()) if len(self.doc) else 0


def _zeros(n: int) -> np.ndarray:
    return np.zeros(n, dtype=np.int64)


def check_packing(seq_len: int, packing: str, buffer: int) -> None:
    """Refuse a packing that is none of :data:`PACKINGS`, or a ``seq_len`` or ``buffer``
    under 1 (or not whole numbers)."""
    if packing not in PACKINGS:
        raise ConfigError(f"packing must be one of {', '.join(PACKINGS)}, got {packing!r}")
    ok = all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in (seq_len, buffer)
    )
    if not ok or int(seq_len) < 1 or int(buffer) < 1:
        raise ConfigError(
            f"seq_len and buffer must be whole numbers of at least 1, got {seq_len!r}, {buffer!r}"
        )


def _check(lengths: np.ndarray, seq_len: int, packing: str, buffer: int) -> np.ndarray:
    check_packing(seq_len, packing, buffer)
    lengths = np.asarray(lengths, dtype=np.int64)
    if lengths.ndim != 1 or (lengths < 0).any():
        raise ConfigError("lengths must be a 1-D array of token counts >= 0")
    return lengths


def pack(
    lengths: np.ndarray, seq_len: int, packing: str = "concat", buffer: int = DEFAULT_BUFFER
) -> Packed:
    """The sequences of a unit whose documents have ``lengths`` tokens."""
    lengths = _check(lengths, seq_len, packing, buffer)
    if packing == "concat":
        return _concat(lengths, int(seq_len))
    if packing == "pad":
        return _pad(lengths, int(seq_len))
    return _best_fit(lengths, int(seq_len), int(buffer))


def count_sequences(
    lengths: np.ndarray,
    docs_per_unit: np.ndarray,
    seq_len: int,
    packing: str = "concat",
    buffer: int = DEFAULT_BUFFER,
) -> np.ndarray:
    """Sequences per unit, for units holding ``docs_per_unit`` consecutive documents of
    ``lengths``: O(units) for ``concat``, vectorised O(documents) for ``pad``, a pass of
    the packer per unit for ``best_fit``."""
    lengths = _check(lengths, seq_len, packing, buffer)
    docs = np.asarray(docs_per_unit, dtype=np.int64)
    ends = np.concatenate([[0], np.cumsum(docs)])
    if ends[-1] != len(lengths):
        raise ConfigError(f"the units hold {ends[-1]} documents, lengths gives {len(lengths)}")
    if packing == "best_fit":
        out = [pack(lengths[a:b], seq_len, packing, buffer).num_sequences for a, b in _pairs(ends)]
        return np.asarray(out, dtype=np.int64)
    per_doc = -(-lengths // seq_len) if packing == "pad" else lengths
    totals = _sums(per_doc, ends)
    return totals if packing == "pad" else -(-totals // seq_len)


def _sums(values: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Sums of ``values[ends[i]:ends[i + 1]]``."""
    c = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    return np.asarray(c[ends[1:]] - c[ends[:-1]], dtype=np.int64)


def _pairs(ends: np.ndarray) -> list[tuple[int, int]]:
    e = ends.tolist()
    return list(itertools.pairwise(e))


def _concat(lengths: np.ndarray, seq_len: int) -> Packed:
    doc_ends = np.cumsum(lengths)
    total = int(doc_ends[-1]) if len(lengths) else 0
    cuts = np.arange(seq_len, total, seq_len, dtype=np.int64)
    edges = np.union1d(np.concatenate([[0], doc_ends]), cuts)
    starts, stops = edges[:-1], edges[1:]
    doc = np.searchsorted(doc_ends, starts, side="right")
    seq = starts // seq_len
    bounds = np.searchsorted(seq, np.arange(-(-total // seq_len) + 1), side="left")
    first = np.concatenate([[0], doc_ends])[doc] if len(doc) else _zeros(0)
    return Packed(seq_len, bounds, doc, starts - first, stops - starts)


def _pad(lengths: np.ndarray, seq_len: int) -> Packed:
    per_doc = -(-lengths // seq_len)
    doc = np.repeat(np.arange(len(lengths), dtype=np.int64), per_doc)
    first = np.concatenate([[0], np.cumsum(per_doc)])[:-1]
    start = (np.arange(len(doc), dtype=np.int64) - np.repeat(first, per_doc)) * seq_len
    length = np.minimum(seq_len, lengths[doc] - start)
    return Packed(seq_len, np.arange(len(doc) + 1, dtype=np.int64), doc, start, length)


def _best_fit(lengths: np.ndarray, seq_len: int, buffer: int) -> Packed:
    seqs: list[list[tuple[int, int, int]]] = []
    for lo in range(0, len(lengths), buffer):
        rest = []
        for d in range(lo, min(lo + buffer, len(lengths))):
            n, s = int(lengths[d]), 0
            while n - s > seq_len:  # whole sequences of a long document's tokens
                seqs.append([(d, s, seq_len)])
                s += seq_len
            if n > s:
                rest.append((n - s, d, s))
        seqs.extend(_fit(rest, seq_len))
    return _packed(seqs, seq_len)


def _fit(pieces: list[tuple[int, int, int]], seq_len: int) -> list[list[tuple[int, int, int]]]:
    """Best-fit decreasing: longest piece first, into the fullest sequence it fits."""
    bins: list[list[tuple[int, int, int]]] = []
    fill: list[int] = []
    room: list[tuple[int, int]] = []  # (room left, bin), sorted
    for n, d, s in sorted(pieces, key=lambda p: (-p[0], p[1])):
        i = bisect.bisect_left(room, (n, -1))
        if i == len(room):
            b = len(bins)
            bins.append([])
            fill.append(0)
        else:
            b = room.pop(i)[1]
        bins[b].append((d, s, n))
        fill[b] += n
        if fill[b] < seq_len:
            bisect.insort(room, (seq_len - fill[b], b))
    return bins


def _packed(seqs: list[list[tuple[int, int, int]]], seq_len: int) -> Packed:
    flat = [p for s in seqs for p in s]
    arr = np.asarray(flat, dtype=np.int64).reshape(-1, 3)
    bounds = np.concatenate([[0], np.cumsum([len(s) for s in seqs])]).astype(np.int64)
    return Packed(seq_len, bounds, arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy())
