"""Checks of a token stream's inputs: its documents' lengths against the index, the
token layout of its sources (one tokenizer, one eos and bos), its ``pad_id`` and its
DataLoader workers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from shardwise._tokens import TokenInfo
from shardwise.errors import ConfigError, FormatError
from shardwise.loader._args import check_int

__all__ = ["check_lengths", "check_pad_id", "check_workers", "token_info"]


def check_workers(num_workers: Any) -> int | None:
    """The DataLoader's ``num_workers`` as workers of the plan: 0 (loading in-process) is
    one, as for ``StreamingDataset``; None stays None (not given)."""
    workers = check_int("num_workers", num_workers, 0, optional=True)
    return max(1, workers) if workers is not None else None


def check_lengths(
    lengths: np.ndarray,
    docs: np.ndarray,
    indexed_docs: np.ndarray,
    totals: np.ndarray | None,
    path_of: Callable[[int], str | None] = lambda unit: None,
) -> None:
    """Refuse document lengths that disagree with the units' documents and tokens the
    index gave (a file rewritten since it was indexed), naming the first such unit's file
    (``path_of``)."""
    ends = np.concatenate([[0], np.cumsum(lengths)])[np.concatenate([[0], np.cumsum(docs)])]
    bad = docs != indexed_docs if len(docs) == len(indexed_docs) else np.ones(1, bool)
    if totals is not None and len(totals) == len(docs):
        bad = bad | (np.diff(ends) != totals)
    if bad.any():
        unit = int(np.flatnonzero(bad)[0])
        raise FormatError(
            "the token counts disagree with the dataset index (the file changed since it "
            "was indexed?); open the dataset again to index it anew",
            path_of(unit) if len(docs) == len(indexed_docs) else None,
            f"unit {unit}" if len(docs) == len(indexed_docs) else None,
        )


def token_info(index: Any, column: str) -> TokenInfo:
    """The token layout of ``column``, the same in every source of a mixed index: one
    tokenizer and dtype, and the same eos and bos (``concat`` tells documents apart by
    their eos, padding is the eos by default)."""
    found = [TokenInfo.of(ix.schema.field(column)) for ix in getattr(index, "indexes", [index])]
    infos = [i for i in found if i is not None]
    if len(infos) < len(found):
        raise ConfigError(f"column {column!r} holds no tokens (write it with 'tokenize')")
    names = [s.name for s in getattr(index, "sources", [])] or ["the dataset"]
    first = infos[0]
    for name, info in zip(names[1:], infos[1:]):
        if (info.dtype, info.tokenizer) != (first.dtype, first.tokenizer):
            raise ConfigError(
                f"sources {names[0]!r} and {name!r} hold {column!r} of different tokenizers "
                f"(tokenizer {first.tokenizer!r}, {first.dtype} and {info.tokenizer!r}, "
                f"{info.dtype})"
            )
        if (info.eos_id, info.bos_id) != (first.eos_id, first.bos_id):
            raise ConfigError(
                f"sources {names[0]!r} and {name!r} were tokenized with different eos/bos "
                f"settings (eos_id={first.eos_id}, bos_id={first.bos_id} and "
                f"eos_id={info.eos_id}, bos_id={info.bos_id}); tokenize them with the same "
                "eos= and bos= to mix them"
            )
    return first


def check_pad_id(pad_id: Any, info: TokenInfo) -> int:
    """``pad_id`` as given (an id of the vocabulary), or the tokenizer's eos, else 0."""
    if pad_id is None:
        return info.eos_id or 0
    if isinstance(pad_id, bool) or not isinstance(pad_id, (int, np.integer)):
        raise ConfigError(f"pad_id must be a token id (an integer), got {pad_id!r}")
    if not 0 <= pad_id < info.vocab_size:
        raise ConfigError(
            f"pad_id must be an id of the shards' vocabulary, in [0, {info.vocab_size}) "
            f"(stored as {np.dtype(info.dtype).name}), got {pad_id}"
        )
    return int(pad_id)
