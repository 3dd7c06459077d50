"""``concat`` sequences as rows (pure numpy): windows of batches, one copy per sequence.

With ``packing="concat"`` sequence ``k`` of a unit is tokens ``k * seq_len`` up to
``(k + 1) * seq_len`` of the unit's flat token array: row ``k`` of the array cut into rows
(:func:`unit_rows`, once per unit on the reading threads: a view of the tokens, no copy,
the unit's short last row padded, and each row's piece starts: 0 and the distinct
document starts inside it). A window of sequences (:func:`take_window`) copies each
sequence's row once into the window's ``input_ids`` (stored dtype to int64 in the same
pass; :func:`take_rows`); the other fields, only when asked for, come from the rows'
piece starts, each piece's number and start spread over its tokens with ``repeat``
(:func:`window_fields`). Window arrays come from a pool (:mod:`~shardwise.plan.buffers`)
and are reused once no batch refers to them, so a window writes into memory it already
has. :func:`window_batches` cuts the window into batches (views) with their
``cu_seqlens`` (views of one array per window). The arrays are those of
:func:`shardwise.plan.sequences.fill_batch` (same values, same dtypes); Python runs once
per sequence (one row copy) and per window, never per document or token.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from shardwise.plan.buffers import Buffers
from shardwise.plan.sequences import IGNORE

__all__ = [
    "UnitRows",
    "field_buffers",
    "take_rows",
    "take_window",
    "unit_rows",
    "window_batches",
    "window_fields",
]


@dataclass(frozen=True)
class UnitRows:
    """One unit's tokens as ``[sequences, seq_len]`` rows.

    Attributes:
        rows: the unit's full rows, a view of its flat tokens (their dtype).
        tail: the short last row padded with ``pad_id`` (``[0, seq_len]`` when none).
        offsets: the documents' ``documents + 1`` offsets into the flat tokens.
        total: the unit's tokens.
        full: the unit's full rows (``len(rows)``).
        pieces: for each row, where its pieces start, as positions in the row: 0, then
            every distinct document start (and the tail's padding) strictly inside it
            (views of one array).
        counts: ``len(pieces[k])`` for each row.
    """

    rows: np.ndarray
    tail: np.ndarray
    offsets: np.ndarray
    total: int
    full: int
    pieces: list[np.ndarray]
    counts: list[int]

    def row(self, k: int) -> np.ndarray:
        """Row ``k`` (the padded tail after the full rows)."""
        row: np.ndarray = self.rows[k] if k < self.full else self.tail[0]
        return row


def unit_rows(
    tokens: np.ndarray, offsets: np.ndarray, seq_len: int, pad_id: int, pieces: bool = True
) -> UnitRows:
    """The rows of a unit whose flat ``tokens`` hold documents ``offsets[i]:offsets[i + 1]``
    (without the rows' piece starts when not ``pieces``: ``input_ids`` need none)."""
    total = len(tokens)
    full = total // seq_len
    rows = tokens[: full * seq_len].reshape(full, seq_len)
    tail = np.full((1 if total % seq_len else 0, seq_len), pad_id, dtype=tokens.dtype)
    tail[:, : total % seq_len] = tokens[full * seq_len :]
    offsets = np.asarray(offsets, dtype=np.int64)
    if not pieces:
        return UnitRows(rows, tail, offsets, total, full, [], [])
    lo = np.arange(full + len(tail), dtype=np.int64) * seq_len
    inner = offsets[(offsets % seq_len != 0) & (offsets < len(lo) * seq_len)]
    at = np.union1d(inner, lo)  # sorted, distinct
    bounds = [*np.searchsorted(at, lo).tolist(), len(at)]
    at %= seq_len
    starts = [at[a:b] for a, b in itertools.pairwise(bounds)]
    return UnitRows(rows, tail, offsets, total, full, starts, np.diff(bounds).tolist())


Taken = tuple[np.ndarray, list[np.ndarray], list[int], list[tuple[int, int]]]


def take_window(
    units: np.ndarray,
    rows: np.ndarray,
    laid: Mapping[int, UnitRows],
    seq_len: int,
    ids_only: bool = False,
    buffers: Buffers | None = None,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Sequences ``(units[i], rows[i])`` as ``[len(rows), seq_len]`` arrays (``input_ids``,
    ``labels``, ``position_ids``, ``document_ids``, ``loss_mask``; only ``input_ids`` when
    ``ids_only``) and the sorted flat positions where a piece starts (the rows' starts
    included; none when ``ids_only``); the arrays come from ``buffers`` (reused once
    free) when given. :func:`take_rows` then :func:`window_fields`."""
    taken = take_rows(units, rows, laid, seq_len, ids_only, buffers)
    if ids_only:
        return {"input_ids": taken[0]}, np.zeros(0, dtype=np.int64)
    return window_fields(taken, field_buffers(len(rows), seq_len, buffers))


def take_rows(
    units: np.ndarray,
    rows: np.ndarray,
    laid: Mapping[int, UnitRows],
    seq_len: int,
    ids_only: bool = False,
    buffers: Buffers | None = None,
) -> Taken:
    """The window's ``input_ids`` (one copy per row, stored dtype to int64), each row's
    piece starts in it (views) and their counts, and its padding's ``(row, column)``; the
    last three empty when ``ids_only``. Python runs once per row."""
    ids = (buffers or Buffers(0)).empty((len(rows), seq_len), np.int64)
    pairs = zip(np.asarray(units).tolist(), np.asarray(rows).tolist())
    parts: list[np.ndarray] = []
    counts: list[int] = []
    pads: list[tuple[int, int]] = []
    if ids_only:
        for i, (u, k) in enumerate(pairs):
            r = laid[u]
            ids[i] = r.rows[k] if k < r.full else r.tail[0]
        return ids, parts, counts, pads
    for i, (u, k) in enumerate(pairs):
        r = laid[u]
        if k < r.full:
            ids[i] = r.rows[k]
        else:
            ids[i] = r.tail[0]
            pads.append((i, r.total - k * seq_len))
        parts.append(r.pieces[k])
        counts.append(r.counts[k])
    return ids, parts, counts, pads


def field_buffers(n: int, seq_len: int, buffers: Buffers | None = None) -> dict[str, np.ndarray]:
    """The arrays :func:`window_fields` writes for ``n`` rows (from ``buffers`` if given)."""
    new = (buffers or Buffers(0)).empty
    out = {f: new((n, seq_len), np.int64) for f in ("labels", "position_ids", "document_ids")}
    out["loss_mask"] = new((n, seq_len), np.bool_)
    return out


def window_fields(
    taken: Taken, out: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every field of a window from :func:`take_rows`, written into ``out``
    (:func:`field_buffers`), and where its pieces start (see :func:`take_window`). Array
    operations only (they release the GIL: another thread can run it)."""
    ids, parts, counts, pads = taken
    n, seq_len = ids.shape
    per_row = np.array(counts, dtype=np.int64)
    first = np.concatenate(parts) + np.repeat(np.arange(0, n * seq_len, seq_len), per_row)
    doc, pos = _pieces(first, per_row, out["document_ids"], out["position_ids"])
    labels, mask = out["labels"], out["loss_mask"]
    flat = labels.reshape(-1)
    flat[:-1] = ids.reshape(-1)[1:]
    flat[first[1:] - 1] = IGNORE  # a piece's last token (a row's last token among them)
    flat[-1] = IGNORE
    mask.fill(True)
    for row, col in pads:
        doc[row, col:], pos[row, col:], labels[row, col:], mask[row, col:] = -1, 0, IGNORE, False
    fields = {"input_ids": ids, "labels": labels, "position_ids": pos, "document_ids": doc}
    fields["loss_mask"] = mask
    return fields, first


def _pieces(
    first: np.ndarray, per_row: np.ndarray, doc_out: np.ndarray, pos_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``document_ids`` and ``position_ids`` of ``[n, seq_len]`` rows whose pieces start at
    flat positions ``first`` (sorted, the rows' starts included; ``per_row`` in each row),
    written into ``doc_out`` and ``pos_out``: each piece's number, and its start, spread
    over its tokens with ``repeat``, the positions the flat index less the start."""
    size = doc_out.size
    lengths = np.diff(first, append=size)
    number = np.arange(len(first), dtype=np.int64)
    number -= np.repeat(np.cumsum(per_row) - per_row, per_row)  # the piece's number in its row
    np.copyto(doc_out.reshape(-1), np.repeat(number, lengths))
    np.subtract(_flat_index(size), np.repeat(first, lengths), out=pos_out.reshape(-1))
    return doc_out, pos_out


_INDEX = np.arange(0, dtype=np.int64)


def _flat_index(size: int) -> np.ndarray:
    """``arange(size)`` (int64, read-only), kept for the next window of the same size."""
    global _INDEX
    index = _INDEX
    if len(index) < size:
        index = np.arange(size, dtype=np.int64)
        index.flags.writeable = False
        _INDEX = index
    return index[:size]


def window_batches(
    window: dict[str, np.ndarray], starts: np.ndarray, batch_size: int
) -> Iterator[dict[str, np.ndarray]]:
    """The window's batches of ``batch_size`` rows (views), each with ``cu_seqlens``: piece
    ends in the flat batch, each row's padding one more segment (views of one array made
    for the whole window from ``starts``, every piece's flat start)."""
    num, seq_len = window["input_ids"].shape
    flat = batch_size * seq_len
    if "document_ids" in window:
        cut = np.searchsorted(starts, np.arange(0, num * seq_len + 1, flat)).tolist()
        cu = np.insert(starts % flat, cut[1:], flat).astype(np.int32)
    for j, lo in enumerate(range(0, num - batch_size + 1, batch_size)):
        batch = {f: a[lo : lo + batch_size] for f, a in window.items()}
        if "document_ids" in window:
            batch["cu_seqlens"] = cu[cut[j] + j : cut[j + 1] + j + 1]
        yield batch
