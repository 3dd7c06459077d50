"""Exact deduplication keys: a 128-bit hash of the normalised content of a column."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import xxhash

from shardwise.ops.dedup import DedupContext, DedupDecision, DedupOp
from shardwise.ops.text import _text, collapse_whitespace, unicode_normalize

__all__ = ["ExactDedup", "first_occurrences", "normalized_keys"]


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
        """Keep each key's first occurrence in task order."""
        empty = np.zeros((0, 2), np.uint64)
        keys = [ctx.keys.load(t, ["keys"]).get("keys", empty) for t in range(ctx.num_tasks)]
        masks = first_occurrences(keys)
        return DedupDecision(masks, {"method": "exact", "removed": int(sum((~m).sum() for m in masks))})


def first_occurrences(keys: list[np.ndarray]) -> list[np.ndarray]:
    """Per task, a boolean keep-mask marking each key's first occurrence in task order."""
    sizes = [len(k) for k in keys]
    if not sum(sizes):
        return [np.zeros(0, dtype=bool) for _ in keys]
    flat = np.ascontiguousarray(np.concatenate([k for k in keys if len(k)]))
    view = flat.view(np.dtype((np.void, 16))).ravel()
    _, first = np.unique(view, return_index=True)
    keep = np.zeros(len(view), dtype=bool)
    keep[first] = True
    return np.split(keep, np.cumsum(sizes)[:-1])
