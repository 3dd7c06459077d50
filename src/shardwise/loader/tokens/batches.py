"""The batches of one (rank, worker)'s sequences, in groups handed to the training loop.

``concat`` sequences are made a window at a time (each sequence one row copy out of its
unit's tokens, the other fields; see :mod:`shardwise.plan.concat_rows`), the other
packings one batch at a time. A group is what one hand-over from the loader thread carries
(see :mod:`.ahead`). ``concat`` batches of ``input_ids`` alone are made on the calling
thread instead (:meth:`SequenceBatches.ids`): each is one copy (one block of a unit in file
order, one ``concatenate`` of its rows otherwise; :mod:`shardwise.plan.concat_ids`), less
than what handing it over from another thread costs.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.loader.tokens.flatmap import MappedRows
from shardwise.loader.tokens.mapped import OpenFiles
from shardwise.loader.tokens.units import TokenUnits, UnitFeed
from shardwise.plan.buffers import Buffers
from shardwise.plan.concat_ids import ids_batches
from shardwise.plan.concat_rows import UnitRows, take_window, unit_rows, window_batches
from shardwise.plan.sequences import FIELDS, fill_batch, sequence_tokens
from shardwise.plan.tokens import TokenPlan

__all__ = ["Groups", "SequenceBatches", "check_fields"]

Groups = Generator[list[dict[str, Any]], None, None]  # groups of batches

WINDOW_TOKENS = 2**16  # tokens per window of concat batches built at once (arrays of 512 KB)
IDS_WINDOW_TOKENS = 2**20  # tokens of input_ids-only batches whose units are looked up at once


def check_fields(fields: Sequence[str]) -> tuple[str, ...]:
    """The arrays a batch holds, ``fields`` in their standard order."""
    chosen = tuple(fields)
    if not chosen or any(f not in FIELDS for f in chosen) or len(set(chosen)) < len(chosen):
        raise ConfigError(f"fields must be distinct names among {FIELDS}, got {fields!r}")
    return tuple(f for f in FIELDS if f in chosen)


@dataclass(frozen=True)
class SequenceBatches:
    """How a token stream's batches are made (its settings, nothing that changes)."""

    units: TokenUnits
    packing: str
    seq_len: int
    batch_size: int
    pad_id: int
    fields: tuple[str, ...]
    batch_format: str
    prefetch_units: int

    def groups(self, plan: TokenPlan, pairs: np.ndarray) -> Groups:
        """Groups of batches of the (unit, sequence) ``pairs`` in order: windows of
        ``concat`` batches, one batch of the other packings."""
        if self.packing == "concat":
            yield from self._concat_groups(plan, pairs)
            return

        def read(unit: int) -> tuple[np.ndarray, np.ndarray]:  # checked against the plan's
            return self.units.read(unit, plan.unit_lengths(unit))

        feed = UnitFeed(pairs[:, 0], read, self.prefetch_units)
        rows = pairs[:, 1].tolist()
        seqs = []
        for i, (unit, (tokens, offsets)) in enumerate(feed):
            seqs.append(sequence_tokens(tokens, offsets, plan.packed(unit), rows[i]))
            if len(seqs) == self.batch_size:
                yield [self._format(fill_batch(seqs, self.seq_len, self.pad_id))]
                seqs = []

    @property
    def inline(self) -> bool:
        """Whether the batches are made on the calling thread (:meth:`ids`), not ahead."""
        return self.packing == "concat" and self.fields == ("input_ids",)

    def ids(self, plan: TokenPlan, pairs: np.ndarray) -> Iterator[dict[str, Any]]:
        """``concat`` batches of ``input_ids`` alone of the (unit, sequence) ``pairs``, in
        order, made on the calling thread: in one pass over the pairs when every unit is a
        view of a file the index locates (:class:`~.flatmap.MappedRows`), else a window at a
        time, units read ahead on the feed's threads."""
        flat, b = self.units.flat, self.batch_size
        if flat is not None:
            laid = MappedRows(flat, self.seq_len, self.pad_id)
            batches = ids_batches(pairs[:, 0], pairs[:, 1], laid, b)
        else:
            batches = self._fed_ids(plan, pairs)
        if self.batch_format != "torch":
            for ids in batches:
                yield {"input_ids": ids}
            return
        import torch

        for ids in batches:
            yield {"input_ids": torch.from_numpy(ids)}

    def _fed_ids(self, plan: TokenPlan, pairs: np.ndarray) -> Iterator[np.ndarray]:
        """:meth:`ids`' arrays a window at a time, the units read by the feed."""
        seq_len, pad_id, b = self.seq_len, self.pad_id, self.batch_size
        files = OpenFiles()

        def read(unit: int) -> UnitRows:
            tokens = self.units.read(unit, plan.unit_lengths(unit), files)
            return unit_rows(*tokens, seq_len, pad_id, False)

        size = max(1, IDS_WINDOW_TOKENS // (seq_len * b)) * b
        feed = UnitFeed(pairs[:, 0], read, self.prefetch_units, self.units.mapped_here)
        for at, laid in feed.windows(size):
            yield from ids_batches(pairs[at, 0], pairs[at, 1], laid, b)

    def _concat_groups(self, plan: TokenPlan, pairs: np.ndarray) -> Groups:
        """Windows of batches, one window per hand-over. All on this one thread: a second
        thread for the fields made the epoch twice as slow (the threads wait on the GIL,
        the per-row copies hold it between rows)."""
        seq_len, pad_id, b = self.seq_len, self.pad_id, self.batch_size
        files = OpenFiles()

        def read(unit: int) -> UnitRows:
            tokens = self.units.read(unit, plan.unit_lengths(unit), files)
            return unit_rows(*tokens, seq_len, pad_id)

        size = max(1, WINDOW_TOKENS // (seq_len * b)) * b
        feed = UnitFeed(pairs[:, 0], read, self.prefetch_units)
        buffers = Buffers()  # the window arrays, reused once no batch holds them
        for at, laid in feed.windows(size):
            units, rows = pairs[at, 0], pairs[at, 1]
            window, starts = take_window(units, rows, laid, seq_len, False, buffers)
            yield [self._format(x) for x in window_batches(window, starts, b)]

    def _format(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        if len(batch) != len(self.fields):
            batch = {k: batch[k] for k in self.fields}
        if self.batch_format == "numpy":
            return batch
        import torch

        return {k: torch.from_numpy(v) for k, v in batch.items()}
