"""Exact deduplication keys: a 128-bit hash of the normalised content of a column."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from shardwise.ops.dedup import DedupContext, DedupDecision, DedupOp
from shardwise.ops.text import _text, collapse_whitespace, unicode_normalize

__all__ = ["ExactDedup", "first_occurrences", "first_of_each_row", "normalized_keys"]


def normalized_keys(values: pa.Array, normalize: bool = True) -> np.ndarray:
    """An ``(n, 2)`` uint64 array of xxh3-128 hashes of the (normalised) values.

    Normalisation is Unicode NFKC, lower case and collapsed whitespace, so texts that
    differ only in those respects are duplicates. Nulls hash like empty strings.
    """
    text = pc.fill_null(values, "")
    if normalize:
        text = collapse_whitespace(pc.utf8_lower(unicode_normalize(text, "NFKC")))
    out = np.empty((len(text), 2), dtype=np.uint64)
    digest = xxhash.xxh3_128_digest
    raw = b"".join(digest(s.encode("utf-8")) for s in text.to_pylist())
    if len(text):
        out[:] = np.frombuffer(raw, dtype=np.uint64).reshape(-1, 2)
    return out


@dataclass(frozen=True)
class ExactDedup(DedupOp):
    """Keep the first row (in input order) of each group with equal normalised ``column``.

    Args:
        column: the text (or binary) column compared.
        normalize: compare after NFKC, lower case and collapsed whitespace.
    """

    column: str = "text"
    normalize: bool = True

    def keys(self, batch: pa.RecordBatch) -> dict[str, np.ndarray]:
        """A 128-bit hash of each row's (normalised) ``column``."""
        return {"keys": normalized_keys(_text(batch, self.column), self.normalize)}

    def decide(self, ctx: DedupContext) -> DedupDecision:
        """Keep each key's first occurrence in task order; the audit table maps each
        removed row to the row kept in its place."""
        empty = np.zeros((0, 2), np.uint64)
        keys = [ctx.keys.load(t, ["keys"]).get("keys", empty) for t in range(ctx.num_tasks)]
        sizes = np.array([len(k) for k in keys], dtype=np.int64)
        first = first_of_each_row(keys)
        removed = np.flatnonzero(first != np.arange(len(first)))
        masks = np.split(first == np.arange(len(first)), np.cumsum(sizes)[:-1])
        kept = first[removed]
        clusters = np.unique(kept, return_counts=True)[1] + 1
        summary = {
            "method": "exact",
            "removed": len(removed),
            "clusters": len(clusters),
            "largest_cluster": int(clusters.max()) if len(clusters) else 0,
        }
        if len(removed):
            summary["audit"] = ctx.write_audit(_audit(removed, kept, sizes))
        return DedupDecision(list(masks), summary)


def first_of_each_row(keys: list[np.ndarray]) -> np.ndarray:
    """For each row of the concatenated tasks, the position of the first row with its key."""
    if not sum(len(k) for k in keys):
        return np.zeros(0, dtype=np.int64)
    flat = np.ascontiguousarray(np.concatenate([k for k in keys if len(k)]))
    view = flat.view(np.dtype((np.void, 16))).ravel()
    _, first, inverse = np.unique(view, return_index=True, return_inverse=True)
    return np.asarray(first[inverse.ravel()], dtype=np.int64)


def first_occurrences(keys: list[np.ndarray]) -> list[np.ndarray]:
    """Per task, a boolean keep-mask marking each key's first occurrence in task order."""
    first = first_of_each_row(keys)
    keep = first == np.arange(len(first))
    return np.split(keep, np.cumsum([len(k) for k in keys])[:-1])


def _audit(removed: np.ndarray, kept: np.ndarray, sizes: np.ndarray) -> pa.Table:
    """``removed_task, removed_row, kept_task, kept_row`` from positions in task order."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])

    def split(pos: np.ndarray) -> tuple[pa.Array, pa.Array]:
        task = np.searchsorted(starts, pos, side="right") - 1
        # a task with no rows shares its start with the next: searchsorted picks the last
        return pa.array(task, pa.int64()), pa.array(pos - starts[task], pa.int64())

    rt, rr = split(removed)
    kt, kr = split(kept)
    return pa.table({"removed_task": rt, "removed_row": rr, "kept_task": kt, "kept_row": kr})
