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
next sequence, on the same or another topology. Units are read ahead on two threads; a
sequence is one copy out of its unit's token array, made in the iterating process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.loader.channel import TopologyChannel
from shardwise.loader.placement import Placement, detect_placement, in_dataloader_worker
from shardwise.loader.read.mixed import MixedIndex
from shardwise.loader.read.opening import open_index
from shardwise.loader.tokens.units import TokenUnits, UnitFeed
from shardwise.plan import Mixing, Resume, Topology
from shardwise.plan.packing import DEFAULT_BUFFER, count_sequences
from shardwise.plan.sequences import fill_batch, sequence_tokens
from shardwise.plan.tokens import TokenPlan
from shardwise.plan.tokenstats import token_stats

__all__ = ["STATE_VERSION", "TokenStreamBase"]

STATE_VERSION = 1
FORMATS = ("numpy", "torch")


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
        epoch_size: tokens per epoch with weighted sources (None: all of them).
        pad_id: the id padding positions get (default: the tokenizer's eos, else 0).
        batch_format: ``"numpy"`` or ``"torch"``.
        rank, world_size: override detection (``torch.distributed`` or ``RANK``/``WORLD_SIZE``).
        num_workers: the DataLoader's workers (for ``len()``, ``stats()`` and ``plan()`` in
            the training process; inside a worker the DataLoader's own count must match).
        prefetch_units: units read ahead per iterating process.
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
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int | None = None,
        prefetch_units: int = 2,
        **open_options: Any,
    ) -> None:
        if batch_format not in FORMATS:
            raise ConfigError(f"batch_format must be 'numpy' or 'torch', got {batch_format!r}")
        self.index = open_index(source, "raise", open_options, None)
        self.units = TokenUnits(self.index, column, count_column)
        self.lengths, self.docs = self.units.lengths()
        self.seq_len, self.batch_size, self.packing, self.buffer = (
            seq_len,
            batch_size,
            packing,
            buffer,
        )
        self.seed, self.shuffle, self.drop_last = seed, shuffle, drop_last
        self.canonical_workers, self.batch_format = canonical_workers, batch_format
        info = self.units.info
        self.pad_id = pad_id if pad_id is not None else (info.eos_id or 0)
        self.mixing: Mixing | None = (
            self.index.mixing(epoch_size, "random") if isinstance(self.index, MixedIndex) else None
        )
        self.rank, self.world_size, self.prefetch_units = rank, world_size, prefetch_units
        self.num_workers = num_workers
        self.epoch = 0
        self.resumes: list[Resume] = []
        self._channel = TopologyChannel.new()
        self._seen: tuple[int, int] | None = None
        self._control = 0  # number of the last epoch/resume control published or applied
        self.counts = count_sequences(self.lengths, self.docs, seq_len, packing, buffer)

    # -- planning ---------------------------------------------------------------------
    def plan(self, topology: Topology | None = None) -> TokenPlan:
        """The epoch's plan on ``topology`` (default: this process's ranks, one worker)."""
        if topology is None:
            p = self._placement()
            topology = Topology(p.world_size, p.num_workers, self.batch_size, self.drop_last)
        return TokenPlan(
            self.lengths,
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

    def _placement(self) -> Placement:
        p = detect_placement(self.rank, self.world_size)
        if self.num_workers is None or p.num_workers == self.num_workers:
            return p
        if in_dataloader_worker():
            raise ConfigError(
                f"TokenStream(num_workers={self.num_workers}) runs in a DataLoader of "
                f"{p.num_workers} workers; give it the DataLoader's num_workers"
            )
        return detect_placement(self.rank, self.world_size, 0, self.num_workers)

    def set_epoch(self, epoch: int) -> None:
        """Stream epoch ``epoch`` next (also in DataLoader workers started later or kept)."""
        self.epoch, self.resumes = int(epoch), []
        self._publish()

    def _publish(self) -> None:
        self._control += 1
        resumes = [r.to_dict() for r in self.resumes]
        self._channel.publish({"n": self._control, "epoch": self.epoch, "resumes": resumes})

    def __len__(self) -> int:
        """Batches this rank yields in the epoch (DataLoader workers included)."""
        return self.plan().batches_per_rank

    # -- iterating --------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        control = self._channel.control()
        if in_dataloader_worker() and control is not None and control["n"] > self._control:
            self._control = int(control["n"])  # newer than this worker's copy: follow it
            self.epoch = int(control["epoch"])
            self.resumes = [Resume.from_dict(r) for r in control["resumes"]]
        p = self._placement()
        self._announce(p)
        plan = self.plan(Topology(p.world_size, p.num_workers, self.batch_size, self.drop_last))
        pairs = plan.worker(p.rank, p.worker_id).pairs()
        yield from self._batches(plan, pairs)
        self.epoch, self.resumes = self.epoch + 1, []  # the next pass is the next epoch

    def _announce(self, p: Placement) -> None:
        if in_dataloader_worker():
            self._channel.announce(p.world_size, p.num_workers)
        else:
            self._seen = (p.world_size, p.num_workers)

    def _batches(self, plan: TokenPlan, pairs: np.ndarray) -> Iterator[dict[str, Any]]:
        feed = UnitFeed(pairs[:, 0], self.units.read, self.prefetch_units)
        rows = pairs[:, 1].tolist()
        seqs = []
        for i, (unit, (tokens, offsets)) in enumerate(feed):
            seqs.append(sequence_tokens(tokens, offsets, plan.packed(unit), rows[i]))
            if len(seqs) == self.batch_size:
                yield self._format(fill_batch(seqs, self.seq_len, self.pad_id))
                seqs = []

    def _format(self, batch: dict[str, np.ndarray]) -> dict[str, Any]:
        if self.batch_format == "numpy":
            return batch
        import torch

        return {k: torch.from_numpy(v) for k, v in batch.items()}

    # -- state and stats --------------------------------------------------------------
    def state_dict(self, consumed_batches: int) -> dict[str, Any]:
        """Where the epoch stands after this rank consumed ``consumed_batches`` batches of
        the current pass (all ranks consume the same number)."""
        seen = self._channel.read()
        topo = (seen.world_size, seen.num_workers) if seen is not None else self._seen
        if topo is None:
            raise ConfigError("state_dict: nothing was iterated yet, so no topology consumed")
        t = Topology(topo[0], topo[1], self.batch_size, self.drop_last)
        resumed = self.plan(t).resume(int(consumed_batches))
        return {
            "version": STATE_VERSION,
            "epoch": self.epoch,
            "seed": self.seed,
            "seq_len": self.seq_len,
            "packing": self.packing,
            "resumes": [r.to_dict() for r in resumed.resumes],
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue the epoch ``state`` describes at its next sequence."""
        if state.get("version") != STATE_VERSION:
            raise ConfigError(f"unknown token stream state version {state.get('version')!r}")
        for key in ("seed", "seq_len", "packing"):
            if state[key] != getattr(self, key):
                raise ConfigError(
                    f"the state has {key}={state[key]!r}, this stream {getattr(self, key)!r}"
                )
        self.epoch = int(state["epoch"])
        self.resumes = [Resume.from_dict(r) for r in state["resumes"]]
        self._publish()

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
            "sources": {n: s for n, s in zip(names, per)},
        }

    def __del__(self) -> None:
        if not in_dataloader_worker():
            channel = getattr(self, "_channel", None)
            if channel is not None:
                channel.remove()
