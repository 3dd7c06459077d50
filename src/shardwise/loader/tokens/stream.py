"""``TokenStream``: fixed-length packed sequences from token shards, exact in tokens.

>>> ds = TokenStream("tokens/", seq_len=2048, batch_size=8, packing="best_fit")  # doctest: +SKIP
>>> loader = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=2)  # doctest: +SKIP

Each item is one batch of one rank, a dict of ``[batch_size, seq_len]`` arrays
(``input_ids``, ``labels``, ``position_ids``, ``document_ids``, ``loss_mask``) and
``cu_seqlens`` (see :mod:`shardwise.plan.sequences`), as numpy or torch. The epoch is a
:class:`~shardwise.plan.tokens.TokenPlan`: every rank takes the same number of steps,
every token of the epoch's documents is in one sequence except a tail of fewer than
``world_size * num_workers * batch_size`` sequences, mixing of :class:`Source` s is by
token weights, and ``state_dict(consumed_batches)`` / ``load_state_dict`` resume at the
next sequence, on the same or another topology. Units are read ahead on two threads; the
batches are made on a loader thread (:mod:`.batches`, :mod:`.ahead`); those of
``input_ids`` alone, one copy each, on the iterating thread (with their units when these
are files of this machine). A ``concat`` stream over shards whose token runs the index
holds (:mod:`shardwise.index.token_layout`) opens from the index alone: each unit's
tokens give its sequences, and the documents' lengths are read only when first needed
(:attr:`TokenStreamBase.lengths`: fields other than ``input_ids``, ``stats()``).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.loader._args import check_choice, check_int, check_order, check_ranks
from shardwise.loader.channel import Seen, TopologyChannel, consumer
from shardwise.loader.passes import Passes
from shardwise.loader.placement import Placement, detect_placement, in_dataloader_worker
from shardwise.loader.read.cached import node_cache
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.read.opening import check_not_empty, open_index
from shardwise.loader.state_version import STATE_VERSION as LOADER_STATE_VERSION
from shardwise.loader.stats import mixing_for
from shardwise.loader.tokens.ahead import made_ahead
from shardwise.loader.tokens.batches import SequenceBatches, check_fields
from shardwise.loader.tokens.checks import check_lengths, check_pad_id, check_workers
from shardwise.loader.tokens.mapped import unit_path
from shardwise.loader.tokens.saved import check_loaded, plan_record, units_digest
from shardwise.loader.tokens.units import TokenUnits
from shardwise.plan import Mixing, Resume, Topology
from shardwise.plan.packing import DEFAULT_BUFFER, check_packing, count_sequences
from shardwise.plan.sequences import FIELDS
from shardwise.plan.tokens import TokenPlan
from shardwise.plan.tokenstats import token_stats

__all__ = ["STATE_VERSION", "TokenStreamBase"]

STATE_VERSION = LOADER_STATE_VERSION  # the same plans: versions change together
GROUPS_AHEAD = 2  # groups of batches made ahead of the training loop


class TokenStreamBase:
    """Stream packed sequences of ``seq_len`` tokens (see the module docstring).

    Args:
        source: token shards (a path, glob, URL or list, or a ``DatasetIndex``), or a list
            of :class:`~shardwise.Source` mixed by token weights (``weight=``; ``choose=``
            counts tokens).
        seq_len: tokens per sequence.
        batch_size: sequences per batch of one rank.
        packing: ``"concat"``, ``"best_fit"`` or ``"pad"`` (:mod:`shardwise.plan.packing`).
        buffer: documents per best-fit buffer.
        column: the token column; ``count_column``: its per-document counts.
        seed, shuffle, drop_last, canonical_workers: as for ``StreamingDataset``.
        epoch_size: tokens per epoch, of one path or weighted sources (None: all of them).
        pad_id: the id padding positions get, one of the vocabulary (default: the
            tokenizer's eos, else 0).
        fields: the arrays each batch holds (default all six; ``("input_ids",)`` skips the
            document layout, for a model that needs only the tokens).
        batch_format: ``"numpy"`` or ``"torch"``.
        rank, world_size: override detection (``torch.distributed`` or ``RANK``/``WORLD_SIZE``).
        num_workers: the DataLoader's workers, 0 for none (for ``len()``, ``stats()`` and
            ``plan()`` in the training process; inside a worker the DataLoader's own count
            must match).
        prefetch_units: units read ahead per iterating process.
        cache_dir, cache_bytes: the node-local unit cache for remote token shards, as for
            ``StreamingDataset`` (local files are read where they are).
        **open_options: for ``index_dataset`` (``storage_options``, ``format``).
    """

    def __init__(
        self,
        source: Any,
        *,
        seq_len: int,
        batch_size: int = 1,
        packing: str = "concat",
        buffer: int = DEFAULT_BUFFER,
        column: str = "tokens",
        count_column: str | None = "num_tokens",
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        canonical_workers: int | None = None,
        epoch_size: int | None = None,
        pad_id: int | None = None,
        batch_format: str = "numpy",
        fields: Sequence[str] = FIELDS,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int | None = None,
        prefetch_units: int = 2,
        cache_dir: str | None = None,
        cache_bytes: int | None = None,
        **open_options: Any,
    ) -> None:
        self.batch_format = check_choice("batch_format", batch_format, ("numpy", "torch"))
        check_packing(seq_len, packing, buffer)
        self.seq_len, self.batch_size = int(seq_len), check_int("batch_size", batch_size, 1)
        self.seed, self.shuffle, self.drop_last = check_order(seed, shuffle, drop_last)
        self.canonical_workers = check_int("canonical_workers", canonical_workers, 1, optional=True)
        self.rank, self.world_size = check_ranks(rank, world_size)
        self.prefetch_units = check_int("prefetch_units", prefetch_units, 0)
        self.packing, self.buffer = packing, buffer
        self.cache = node_cache(cache_dir, cache_bytes)
        counted = [count_column] if count_column else []  # mixed: the columns it reads
        self.index = open_index(source, "raise", open_options, [column], (), cache_dir, counted)
        self.units = TokenUnits(self.index, column, count_column, cache=self.cache)
        totals = self.units.totals() if packing == "concat" else None
        self._lengths: np.ndarray | None = None
        if totals is None:
            self._lengths, self.docs = self.units.lengths()
        else:  # concat needs each unit's tokens only: the documents' lengths when asked
            self.docs = self.index.counts()
        self.fields = check_fields(fields)
        self.pad_id = check_pad_id(pad_id, self.units.info)
        self.mixing: Mixing | None = mixing_for(self.index, epoch_size, "random")
        self.num_workers = check_workers(num_workers)
        self._channel = TopologyChannel.new()
        # removed with this object, in the process that made it: never by a copy pickled
        # to a DataLoader worker or to another training process (Ray Train, mp.spawn)
        weakref.finalize(self, self._channel.remove)
        self._passes = Passes(channel=self._channel)
        self._seen: Seen | None = None  # this process's own latest pass
        self.counts = (
            count_sequences(self.lengths, self.docs, seq_len, packing, buffer)
            if totals is None
            else -(-totals // seq_len)
        )
        check_not_empty(self.index, self.counts, what="tokens to make sequences of")

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document, every unit's documents in unit order (read at the first
        call when the index gave each unit's tokens)."""
        if self._lengths is None:
            lengths, docs = self.units.lengths()
            check_lengths(
                lengths, docs, self.docs, self.units.totals(), partial(unit_path, self.index)
            )
            self._lengths = lengths
        return self._lengths

    def plan(self, topology: Topology | None = None) -> TokenPlan:
        """The epoch's plan on ``topology`` (default: this process's ranks, one worker)."""
        if topology is None:
            p = self._placement()
            topology = Topology(p.world_size, p.num_workers, self.batch_size, self.drop_last)
        return TokenPlan(
            self._lengths if self._lengths is not None else lambda: self.lengths,
            self.docs,
            self.seq_len,
            topology,
            packing=self.packing,
            buffer=self.buffer,
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            resumes=self.resumes,
            mixing=self.mixing,
            canonical_workers=self.canonical_workers,
            counts=self.counts,
        )

    def _given(self) -> tuple[int, int | None]:
        return self._placement().world_size, self.num_workers

    def _placement(self, iterating: bool = False) -> Placement:
        p = detect_placement(self.rank, self.world_size)
        if self.num_workers is None or p.num_workers == self.num_workers:
            return p
        if in_dataloader_worker():
            raise ConfigError(
                f"TokenStream(num_workers={self.num_workers}) runs in a DataLoader of "
                f"{p.num_workers} workers; give it the DataLoader's num_workers"
            )  # a pass in this process streams the rank's share as its one worker
        return p if iterating else detect_placement(self.rank, self.world_size, 0, self.num_workers)

    @property
    def epoch(self) -> int:
        """The latest pass's epoch; each new pass is the next one unless ``set_epoch`` or
        ``load_state_dict`` said otherwise (see :mod:`~shardwise.loader.passes`)."""
        if in_dataloader_worker():
            return self._passes.epoch
        return self._passes.latest_epoch(self._seen)

    @property
    def resumes(self) -> list[Resume]:
        return self._passes.resumes

    def set_epoch(self, epoch: int) -> None:
        """Stream epoch ``epoch`` next (also in DataLoader workers started later or kept)."""
        self._set(check_int("epoch", epoch, 0), [])

    def _set(self, epoch: int, resumes: list[Resume]) -> None:
        """Stream ``epoch`` from ``resumes`` next; tell the DataLoader workers."""
        passes = self._passes
        passes.epoch, passes.resumes = int(epoch), list(resumes)
        if in_dataloader_worker():
            passes.pinned = True  # a worker's own copy: its next pass is this epoch
        passes.publish()

    def __len__(self) -> int:
        """Batches this rank yields in the epoch (DataLoader workers included)."""
        return self.plan().batches_per_rank

    def __iter__(self) -> Iterator[dict[str, Any]]:
        p = self._placement(iterating=True)
        self._passes.begin_pass(p.rank, p.worker_id)
        self._announce(p)
        plan = self.plan(Topology(p.world_size, p.num_workers, self.batch_size, self.drop_last))
        pairs = plan.worker(p.rank, p.worker_id).pairs()
        batches = self._batches()
        if batches.inline:
            yield from batches.ids(plan, pairs)
        else:
            yield from made_ahead(batches.groups(plan, pairs), GROUPS_AHEAD)

    def _batches(self) -> SequenceBatches:
        return SequenceBatches(
            units=self.units,
            packing=self.packing,
            seq_len=self.seq_len,
            batch_size=self.batch_size,
            pad_id=self.pad_id,
            fields=self.fields,
            batch_format=self.batch_format,
            prefetch_units=self.prefetch_units,
        )

    def _announce(self, p: Placement) -> None:
        if in_dataloader_worker():
            self._channel.announce(p.world_size, p.num_workers, self._passes.epoch)
        else:
            self._seen = Seen(p.world_size, p.num_workers, time.time(), self._passes.epoch)

    def state_dict(self, consumed_batches: int) -> dict[str, Any]:
        """Where the epoch stands after this rank consumed ``consumed_batches`` batches of
        the current pass (all ranks consume the same number)."""
        consumed = check_int("consumed_batches", consumed_batches, 0)
        world_size, num_workers = consumer(
            (self._seen, self._channel.read()), self._given, consumed, "TokenStream"
        )
        t = Topology(world_size, num_workers, self.batch_size, self.drop_last)
        resumed = self.plan(t).resume(consumed)
        resumes = [r.to_dict() for r in resumed.resumes]
        return {"version": STATE_VERSION, "epoch": self.epoch, **self._record(), "resumes": resumes}

    def _record(self) -> dict[str, Any]:
        """What decides the epoch's plan (:mod:`.saved`)."""
        return plan_record(
            seed=self.seed,
            seq_len=self.seq_len,
            packing=self.packing,
            shuffle=self.shuffle,
            buffer=self.buffer,
            digest=units_digest(self.docs, self.counts),
            index=self.index,
            mixing=self.mixing,
            canonical_workers=self.canonical_workers,
        )

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch ``state`` describes at its next sequence (a state of a plan
        made otherwise is refused: :mod:`.saved`)."""
        self._set(*check_loaded(state, self._record()))

    def stats(self) -> dict[str, Any]:
        """Tokens, sequences, padding and split documents per source, and the epoch's."""
        plan = self.plan()
        names = (
            [s.name for s in self.index.sources] if isinstance(self.index, MixedIndex) else ["all"]
        )
        per = token_stats(plan)
        return {
            "seq_len": self.seq_len,
            "packing": self.packing,
            "batches_per_rank": plan.batches_per_rank,
            "sequences_left_out": plan.num_left_out,
            "sequences_padded": plan.num_padded,
            "sources": {n: s for n, s in zip(names, per)},
        }
