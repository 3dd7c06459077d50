"""``concat`` sequences as rows (pure numpy): windows of batches, one copy per sequence.

With ``packing="concat"`` sequence ``k`` of a unit is tokens ``k * seq_len`` up to
``(k + 1) * seq_len`` of the unit's flat token array: row ``k`` of the array cut into rows
(:func:`unit_rows`, once per unit on the reading threads: a view of the tokens, no copy,
and the unit's short last row padded, plus each row's first and last document boundary).
A window of sequences (:func:`take_window`) copies each sequence's row once into the
window's ``input_ids`` (stored dtype to int64 in the same pass); the other fields come
from the document starts that fall inside the rows (looked up per row in the unit's
table, no search), numbered per piece and spread over the window's tokens with
``repeat``, and only when asked for. :func:`window_batches` cuts the window into batches
(views) with their ``cu_seqlens``. The arrays are those of
:func:`shardwise.plan.sequences.fill_batch` (same values, same dtypes); Python runs once
per sequence (one row copy) and per window, never per document or token.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from shardwise.plan.buffers import Buffers
from shardwise.plan.sequences import IGNORE

__all__ = ["UnitRows", "take_window", "unit_rows", "window_batches"]


@dataclass(frozen=True)
class UnitRows:
    """One unit's tokens as ``[sequences, seq_len]`` rows.

    Attributes:
        rows: the unit's full rows, a view of its flat tokens (their dtype).
        tail: the short last row padded with ``pad_id`` (``[0, seq_len]`` when none).
        offsets: the documents' ``documents + 1`` offsets into the flat tokens.
        total: the unit's tokens.
        full: the unit's full rows (``len(rows)``).
        inside: for each row, where documents (and the tail's padding) start strictly
            inside it, as positions in the row (views of one array).
    """

    rows: np.ndarray
    tail: np.ndarray
    offsets: np.ndarray
    total: int
    full: int
    inside: list[np.ndarray]

    def row(self, k: int) -> np.ndarray:
        """Row ``k`` (the padded tail after the full rows)."""
        row: np.ndarray = self.rows[k] if k < self.full else self.tail[0]
        return row


def unit_rows(tokens: np.ndarray, offsets: np.ndarray, seq_len: int, pad_id: int) -> UnitRows:
    """The rows of a unit whose flat ``tokens`` hold documents ``offsets[i]:offsets[i + 1]``."""
    total = len(tokens)
    full = total // seq_len
    rows = tokens[: full * seq_len].reshape(full, seq_len)
    tail = np.full((1 if total % seq_len else 0, seq_len), pad_id, dtype=tokens.dtype)
    tail[:, : total % seq_len] = tokens[full * seq_len :]
    offsets = np.asarray(offsets, dtype=np.int64)
    lo = np.arange(full + len(tail), dtype=np.int64) * seq_len
    first = np.searchsorted(offsets, lo, side="right").tolist()
    stop = np.searchsorted(offsets, lo + seq_len, side="left").tolist()
    at = offsets % seq_len
    inside = [at[a:b] for a, b in zip(first, stop)]
    return UnitRows(rows, tail, offsets, total, full, inside)


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
    free) when given. Python runs once per row: its copy and a view of its piece starts."""
    n = len(rows)
    new = (buffers or Buffers(0)).empty
    ids = new((n, seq_len), np.int64)
    pairs = zip(np.asarray(units).tolist(), np.asarray(rows).tolist())
    if ids_only:
        for i, (u, k) in enumerate(pairs):
            r = laid[u]
            ids[i] = r.rows[k] if k < r.full else r.tail[0]
        return {"input_ids": ids}, np.zeros(0, dtype=np.int64)
    parts: list[np.ndarray] = []
    pads: list[tuple[int, int]] = []
    for i, (u, k) in enumerate(pairs):
        r = laid[u]
        if k < r.full:
            ids[i] = r.rows[k]
        else:
            ids[i] = r.tail[0]
            pads.append((i, r.total - k * seq_len))
        parts.append(r.inside[k])
    return _fields(ids, parts, pads, new)


def _fields(
    ids: np.ndarray,
    parts: list[np.ndarray],
    pads: list[tuple[int, int]],
    new: Callable[[tuple[int, ...], type], np.ndarray],
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Every field of the window whose ``input_ids`` are ``ids``, its rows' pieces
    starting (inside the rows) at ``parts`` and its padding at ``pads``, and where its
    pieces start (see :func:`take_window`)."""
    n, seq_len = ids.shape
    counts = np.fromiter(map(len, parts), np.int64, n)
    starts = np.concatenate(parts) + np.repeat(np.arange(0, n * seq_len, seq_len), counts)
    starts = _distinct(starts)
    doc, pos, first = _pieces(starts, new((n, seq_len), np.int64), new((n, seq_len), np.int64))
    labels = new((n, seq_len), np.int64)
    labels.reshape(-1)[:-1] = ids.reshape(-1)[1:]
    labels[:, -1] = IGNORE
    labels.reshape(-1)[starts - 1] = IGNORE  # a piece's last token
    mask = new((n, seq_len), np.bool_)
    mask.fill(True)
    for row, col in pads:
        doc[row, col:], pos[row, col:], labels[row, col:], mask[row, col:] = -1, 0, IGNORE, False
    fields = {"input_ids": ids, "labels": labels, "position_ids": pos, "document_ids": doc}
    fields["loss_mask"] = mask
    return fields, first


def _distinct(values: np.ndarray) -> np.ndarray:
    """``values`` sorted, each once (``np.unique`` of a few hundred sorted integers, without
    its fixed cost of tens of microseconds)."""
    values = np.sort(values)
    keep = np.empty(len(values), dtype=bool)
    keep[:1] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def _pieces(
    starts: np.ndarray, doc_out: np.ndarray, pos_out: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``document_ids`` and ``position_ids`` of ``[n, seq_len]`` rows whose pieces start at
    the rows' starts and at flat positions ``starts``, written into ``doc_out`` and
    ``pos_out``: running sums of steps that are 1 inside a piece (0 for the piece number)
    and set the count back to 0 where a piece (a row) starts; two passes over the tokens
    each. Also every piece's flat start, sorted."""
    n, seq_len = doc_out.shape
    size = n * seq_len
    first = _distinct(np.concatenate([starts, np.arange(0, size, seq_len)]))  # piece starts
    lengths = np.diff(first, append=size)
    pos = pos_out.reshape(-1)
    pos.fill(1)
    pos[first[1:]] = 1 - lengths[:-1]
    pos[0] = 0
    np.cumsum(pos, out=pos)
    per_row = np.bincount(first // seq_len, minlength=n)
    doc = doc_out.reshape(-1)
    doc.fill(0)
    doc[first] = 1
    doc[seq_len::seq_len] = 1 - per_row[:-1]
    doc[0] = 0
    np.cumsum(doc, out=doc)
    return doc_out, pos_out, first


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
