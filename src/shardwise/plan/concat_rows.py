"""``concat`` sequences as rows (pure numpy): windows of batches, vectorised.

With ``packing="concat"`` sequence ``k`` of a unit is tokens ``k * seq_len`` up to
``(k + 1) * seq_len`` of the unit's flat token array: row ``k`` of the array cut into rows
(:func:`unit_rows`, once per unit on the reading threads, padding the last row). A window
of sequences (:func:`take_window`) is one row gather per unit for ``input_ids``; the other
fields come from the document starts that fall inside the window's rows (two
``searchsorted`` per unit), numbered per piece and spread over the window's tokens with
``repeat``. :func:`window_batches` cuts the window into batches (views) with their
``cu_seqlens``. The arrays are those of :func:`shardwise.plan.sequences.fill_batch` (same
values, same dtypes); no Python runs per sequence or per document, only per window and
unit.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

from shardwise.plan.sequences import IGNORE

__all__ = ["UnitRows", "take_window", "unit_rows", "window_batches"]


@dataclass(frozen=True)
class UnitRows:
    """One unit's tokens as ``[sequences, seq_len]`` rows.

    Attributes:
        ids: the tokens (their dtype), ``pad_id`` after the last one.
        offsets: the documents' ``documents + 1`` offsets into the flat tokens.
        total: the unit's tokens.
    """

    ids: np.ndarray
    offsets: np.ndarray
    total: int


def unit_rows(tokens: np.ndarray, offsets: np.ndarray, seq_len: int, pad_id: int) -> UnitRows:
    """The rows of a unit whose flat ``tokens`` hold documents ``offsets[i]:offsets[i + 1]``."""
    total = len(tokens)
    ids = np.empty(-(-total // seq_len) * seq_len, dtype=tokens.dtype)
    ids[:total] = tokens
    ids[total:] = pad_id
    return UnitRows(ids.reshape(-1, seq_len), np.asarray(offsets, dtype=np.int64), total)


def _starts(r: UnitRows, at: np.ndarray, ks: np.ndarray, seq_len: int) -> np.ndarray:
    """Flat window positions of the document starts (and the padding's start) strictly
    inside rows ``ks`` of ``r``, placed at window rows ``at``."""
    lo = ks * seq_len
    a = np.searchsorted(r.offsets, lo, side="right")
    cnt = np.searchsorted(r.offsets, lo + seq_len, side="left") - a
    first = np.cumsum(cnt) - cnt
    idx = np.repeat(a - first, cnt) + np.arange(int(cnt.sum()))
    return np.asarray(np.repeat(at * seq_len - lo, cnt) + r.offsets[idx], dtype=np.int64)


def take_window(
    units: np.ndarray,
    rows: np.ndarray,
    laid: Mapping[int, UnitRows],
    seq_len: int,
    ids_only: bool = False,
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Sequences ``(units[i], rows[i])`` as ``[len(rows), seq_len]`` arrays (``input_ids``,
    ``labels``, ``position_ids``, ``document_ids``, ``loss_mask``; only ``input_ids`` when
    ``ids_only``) and the sorted flat positions where a piece starts inside a row."""
    units, rows = np.asarray(units, dtype=np.int64), np.asarray(rows, dtype=np.int64)
    n = len(rows)
    ids = np.empty((n, seq_len), dtype=np.int64)
    parts: list[np.ndarray] = []
    pads: list[tuple[int, int]] = []
    present = np.unique(units).tolist()
    for u in present:
        at = np.arange(n) if len(present) == 1 else np.flatnonzero(units == u)
        ks, r = rows[at], laid[u]
        ids[at] = r.ids[ks]
        if ids_only:
            continue
        parts.append(_starts(r, at, ks, seq_len))
        last = np.flatnonzero(ks * seq_len + seq_len > r.total)
        pads.extend(zip(at[last].tolist(), (r.total - ks[last] * seq_len).tolist()))
    if ids_only:
        return {"input_ids": ids}, np.zeros(0, dtype=np.int64)
    starts = np.unique(np.concatenate(parts))
    doc, pos = _pieces(starts, n, seq_len)
    labels = np.empty((n, seq_len), dtype=np.int64)
    labels[:, :-1] = ids[:, 1:]
    labels[:, -1] = IGNORE
    labels.reshape(-1)[starts - 1] = IGNORE  # a piece's last token
    for row, col in pads:
        doc[row, col:], pos[row, col:], labels[row, col:] = -1, 0, IGNORE
    fields = {"input_ids": ids, "labels": labels, "position_ids": pos, "document_ids": doc}
    fields["loss_mask"] = doc >= 0
    return fields, starts


def _pieces(starts: np.ndarray, n: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``document_ids`` and ``position_ids`` of ``n`` rows whose pieces start at the rows'
    starts and at flat positions ``starts``: numbered on the pieces, spread with ``repeat``."""
    first = np.union1d(starts, np.arange(0, n * seq_len, seq_len))  # every piece's start
    lengths = np.diff(first, append=n * seq_len)
    row_first = np.searchsorted(first, first - first % seq_len)
    doc = np.repeat(np.arange(len(first)) - row_first, lengths)
    pos = np.arange(n * seq_len, dtype=np.int64)
    pos -= np.repeat(first, lengths)
    return doc.reshape(n, seq_len), pos.reshape(n, seq_len)


def window_batches(
    window: dict[str, np.ndarray], starts: np.ndarray, batch_size: int
) -> Iterator[dict[str, np.ndarray]]:
    """The window's batches of ``batch_size`` rows (views), each with ``cu_seqlens``: piece
    ends in the flat batch, each row's padding one more segment."""
    num, seq_len = window["input_ids"].shape
    flat = batch_size * seq_len
    ends = np.arange(0, flat + 1, seq_len)
    cut = np.searchsorted(starts, np.arange(0, num * seq_len + 1, flat))
    for j, lo in enumerate(range(0, num - batch_size + 1, batch_size)):
        batch = {f: a[lo : lo + batch_size] for f, a in window.items()}
        if "document_ids" not in window:
            yield batch
            continue
        inside = starts[cut[j] : cut[j + 1]] - lo * seq_len
        batch["cu_seqlens"] = np.union1d(inside, ends).astype(np.int32)
        yield batch
