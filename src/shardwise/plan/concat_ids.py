"""``input_ids``-only ``concat`` batches (pure numpy): one copy per batch.

A batch whose ``B`` sequences are consecutive full rows of one unit (what a stream in file
order, ``shuffle=False``, gives but at a unit's end or a cut of the plan) is one block of
the unit's flat tokens: :func:`ids_batches` copies the rows' view ``rows[k : k + B]`` once,
stored dtype to int64 in the same pass, as a loop over a flat ``np.memmap`` copies its
slices. Any other batch (rows of several units, out of order, or a unit's padded tail) is
one ``concatenate`` of its ``B`` row views (:class:`~shardwise.plan.concat_rows.UnitRows`)
into the batch's flat int64 array. Python runs once per batch, and for the other batches
once per row to name its view; never per token. The values are those of
:func:`~shardwise.plan.concat_rows.take_rows` (the ``input_ids`` of every packing's
:func:`~shardwise.plan.sequences.fill_batch`), batch by batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np

from shardwise.plan.concat_rows import UnitRows, unit_rows

__all__ = ["batch_runs", "ids_batches", "token_rows"]


def token_rows(tokens: np.ndarray, seq_len: int, pad_id: int) -> UnitRows:
    """A unit's flat ``tokens`` as rows for ``input_ids`` alone: no document boundaries
    needed (its ``offsets`` hold the unit as one piece)."""
    return unit_rows(tokens, np.array([0, len(tokens)], np.int64), seq_len, pad_id, False)


def batch_runs(
    units: np.ndarray, rows: np.ndarray, batch_size: int
) -> tuple[list[int], list[int], list[bool]]:
    """For each whole batch of ``batch_size`` of the ``(units[i], rows[i])`` sequences: its
    first unit, its first row, and whether its rows are ``rows[k], rows[k] + 1, ...`` of
    that one unit (a trailing part batch is left out, as every batch maker does)."""
    n = len(rows) // batch_size * batch_size
    u = np.asarray(units[:n], dtype=np.int64).reshape(-1, batch_size)
    k = np.asarray(rows[:n], dtype=np.int64).reshape(-1, batch_size)
    step = np.arange(batch_size, dtype=np.int64)
    run = (u == u[:, :1]).all(axis=1) & (k - k[:, :1] == step).all(axis=1)
    return u[:, 0].tolist(), k[:, 0].tolist(), run.tolist()


def ids_batches(
    units: np.ndarray, rows: np.ndarray, laid: Mapping[int, UnitRows], batch_size: int
) -> Iterator[np.ndarray]:
    """The int64 ``[batch_size, seq_len]`` ``input_ids`` of each whole batch of the
    ``(units[i], rows[i])`` sequences, in order (see the module docstring)."""
    firsts, starts, runs = batch_runs(units, rows, batch_size)
    all_units: list[int] | None = None
    all_rows: list[int] = []
    for j, run in enumerate(runs):
        r, k = laid[firsts[j]], starts[j]
        if run and k + batch_size <= r.full:
            yield r.rows[k : k + batch_size].astype(np.int64)
            continue
        if all_units is None:  # the first batch of this call that is no block
            all_units, all_rows = np.asarray(units).tolist(), np.asarray(rows).tolist()
        lo = j * batch_size
        yield gather(all_units[lo : lo + batch_size], all_rows[lo : lo + batch_size], laid)


def gather(units: list[int], rows: list[int], laid: Mapping[int, UnitRows]) -> np.ndarray:
    """Sequences ``(units[i], rows[i])`` (at least one) as one int64 ``[len(rows),
    seq_len]`` array: one ``concatenate`` of their row views (a unit's padded tail after
    its full rows)."""
    views = []
    for u, k in zip(units, rows):
        r = laid[u]
        views.append(r.rows[k] if k < r.full else r.tail[0])
    out = np.empty((len(views), len(views[0])), dtype=np.int64)
    np.concatenate(views, out=out.reshape(-1))
    return out
