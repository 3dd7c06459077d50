"""Token plans (pure numpy): an epoch of fixed-length sequences, exact in tokens.

A token plan is a sample plan whose samples are *sequences*: each unit's documents are
packed into sequences (:mod:`.packing`; a function of the unit's document lengths only),
the number of sequences per unit becomes the unit's count, and the ordinary plan
(:func:`~shardwise.plan.plans.make_plan`) deals the sequences out: equal steps on every
rank, deterministic per seed, every sequence once per epoch except a tail of fewer than
``world_size * num_workers * batch_size`` sequences under ``drop_last`` (the default),
resume at sequence granularity in O(units) (the per-unit counts are kept, not rebuilt),
mixed sources and ``canonical_workers`` as for samples. As every token of a unit is in
exactly one of its sequences, every token of the epoch's documents is trained on once,
except those of the left-out tail.

Mixing is by token weights: every sequence holds ``seq_len`` token positions, so a
source's share of the epoch's sequences is its share of the tokens. Quotas are whole
sequences: ``choose=`` and ``epoch_size=`` in tokens are rounded down to a multiple of
``seq_len``; a source's quota in tokens is ``seq_len`` times its sequences, of which
:meth:`TokenPlan.stats` counts the padding.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.plan.mix import Mixing
from shardwise.plan.packing import DEFAULT_BUFFER, Packed, count_sequences, pack
from shardwise.plan.plans import Plan, make_plan, source_counts
from shardwise.plan.topology import Resume, Topology

__all__ = ["TokenPlan", "token_mixing"]

PACKED_KEPT = 64  # units whose packing a plan keeps


def token_mixing(mixing: Mixing, seq_len: int) -> Mixing:
    """``mixing`` with quotas in tokens (``choose=``, ``epoch_size=``) as sequences."""
    rules = tuple(
        replace(r, choose=r.choose // seq_len) if r.choose is not None else r for r in mixing.rules
    )
    size = mixing.epoch_size
    if size is not None and size < seq_len:
        raise ConfigError(f"epoch_size={size} tokens is less than one sequence of {seq_len}")
    return replace(mixing, rules=rules, epoch_size=size // seq_len if size else None)


class TokenPlan:
    """The sequences of one epoch, dealt to ranks and workers.

    Args:
        lengths: tokens per document, every unit's documents in unit order, or a function
            giving them, called the first time they are needed (``counts`` must then be
            given: a ``concat`` epoch's plan and its batches of ``input_ids`` never need
            them).
        docs_per_unit: documents per unit (``DatasetIndex.counts()``).
        seq_len: tokens per sequence.
        topology: ranks, workers, sequences per batch, drop_last, interleave.
        packing: ``concat``, ``best_fit`` or ``pad`` (:mod:`.packing`).
        buffer: documents per best-fit buffer.
        seed, epoch, shuffle, resumes, canonical_workers: as for ``make_plan``.
        mixing: sources with quotas in tokens (see the module docstring).
        counts: sequences per unit, when known (a resume passes its own).
    """

    def __init__(
        self,
        lengths: np.ndarray | Callable[[], np.ndarray],
        docs_per_unit: np.ndarray,
        seq_len: int,
        topology: Topology,
        *,
        packing: str = "concat",
        buffer: int = DEFAULT_BUFFER,
        seed: int = 0,
        epoch: int = 0,
        shuffle: bool = True,
        resumes: Sequence[Resume] = (),
        mixing: Mixing | None = None,
        canonical_workers: int | None = None,
        counts: np.ndarray | None = None,
    ) -> None:
        self._lengths = lengths if callable(lengths) else np.asarray(lengths, dtype=np.int64)
        self.docs = np.asarray(docs_per_unit, dtype=np.int64)
        self.seq_len, self.packing, self.buffer = int(seq_len), packing, int(buffer)
        if counts is None and callable(lengths):
            raise ConfigError("a token plan given its lengths as a function needs counts=")
        if counts is None:
            counts = count_sequences(self.lengths, self.docs, self.seq_len, packing, self.buffer)
        self.counts = np.asarray(counts, dtype=np.int64)
        self.doc_ends = np.concatenate([[0], np.cumsum(self.docs)])
        self.mixing = mixing
        self._args: dict[str, Any] = dict(seed=seed, epoch=epoch, shuffle=shuffle)
        self.canonical_workers = canonical_workers
        self.plan: Plan = make_plan(
            self.counts,
            topology,
            resumes=resumes,
            mixing=token_mixing(mixing, self.seq_len) if mixing is not None else None,
            canonical_workers=canonical_workers,
            **self._args,
        )
        self.topology = topology
        self._packed: OrderedDict[int, Packed] = OrderedDict()

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document, every unit's documents in unit order."""
        if callable(self._lengths):
            self._lengths = np.asarray(self._lengths(), dtype=np.int64)
        return self._lengths

    # -- the sample plan's view -------------------------------------------------------
    @property
    def batches_per_rank(self) -> int:
        return self.plan.batches_per_rank

    @property
    def num_left_out(self) -> int:
        """Sequences of the epoch left out (the tail, fewer than one global batch)."""
        return self.plan.num_left_out

    @property
    def num_padded(self) -> int:
        """Sequences repeated to fill the last global batch (``drop_last=False`` only)."""
        return self.plan.num_padded

    def worker(self, rank: int, worker_id: int = 0) -> Any:
        """The plan of one (rank, worker); its ``(unit, row)`` pairs are (unit, sequence)."""
        return self.plan.worker(rank, worker_id)

    def rank_batches(self, rank: int) -> list[np.ndarray]:
        """The rank's batches as ``(batch_size, 2)`` arrays of ``(unit, sequence)``."""
        return self.plan.rank_batches(rank)

    def resume(self, consumed_batches: int, topology: Topology | None = None) -> TokenPlan:
        """The plan that continues after ``consumed_batches`` batches per rank: O(units)."""
        plan = self.plan.resume(consumed_batches, topology)
        out = object.__new__(TokenPlan)
        out.__dict__.update(self.__dict__)
        out.plan, out.topology, out._packed = plan, topology or self.topology, OrderedDict()
        return out

    @property
    def resumes(self) -> list[Resume]:
        return list(getattr(self.plan, "resumes", []))

    # -- sequences --------------------------------------------------------------------
    def unit_lengths(self, unit: int) -> np.ndarray:
        """Token lengths of ``unit``'s documents."""
        return self.lengths[self.doc_ends[unit] : self.doc_ends[unit + 1]]

    def packed(self, unit: int) -> Packed:
        """The sequences of ``unit`` (the last few units' are kept)."""
        p = self._packed.get(unit)
        if p is None:
            p = pack(self.unit_lengths(unit), self.seq_len, self.packing, self.buffer)
            self._packed[unit] = p
            while len(self._packed) > PACKED_KEPT:
                self._packed.popitem(last=False)
        return p

    def source_sequences(self) -> list[int]:
        """Sequences each source gives to the epoch (one entry without mixing)."""
        if self.mixing is None:
            return [int(self.counts.sum()) - self.num_left_out + self.num_padded]
        t = self.resumes[0].topology if self.resumes else self.topology
        m = token_mixing(self.mixing, self.seq_len)
        return source_counts(m, self.counts, t, self.canonical_workers)
