"""``StreamingDatasetBase``: exact, equal, deterministic, resumable (parts: :mod:`.parts`).
Torch-free for DALI's source workers: ``StreamingDataset`` (:mod:`.iterable`) adds torch."""

from __future__ import annotations

import inspect
from collections.abc import Iterator, Sequence
from dataclasses import replace
from functools import partial
from importlib import import_module
from typing import Any

import pyarrow.compute as pc

import shardwise.loader.parts as parts
from shardwise.errors import PlanError
from shardwise.formats import OnError, check_on_error
from shardwise.loader._args import (
    check_bool,
    check_columns,
    check_filter,
    check_format,
    check_int,
    check_order,
    check_threads,
)
from shardwise.loader.batches.convert import Padding, check_padding
from shardwise.loader.batches.memory import WindowMemory
from shardwise.loader.batches.reading import BatchFormat
from shardwise.loader.collating import loader_items, loader_length
from shardwise.loader.hosted import hosted_items
from shardwise.loader.placement import Ranks, detect_placement, in_dataloader_worker, place_ranks
from shardwise.loader.planner import interleave_for
from shardwise.loader.read.cached import node_cache
from shardwise.loader.read.headstart import HeadStart
from shardwise.loader.read.mixed import read_counts
from shardwise.loader.read.opening import open_index
from shardwise.loader.shard import shard_items
from shardwise.loader.stats import epoch_stats, mixing_for
from shardwise.loader.trainer_hooks import hosting_for
from shardwise.loader.workers.setup import ring_bytes_for, setup_worker
from shardwise.loader.wrapper_position import position_of
from shardwise.loader.wrappers import Hosting, lightning_epoch, pass_hosting, wrapped
from shardwise.plan import Plan, Topology
from shardwise.plan.budget import DEFAULT_SHUFFLE_BYTES

__all__ = ["StreamingDatasetBase"]


class StreamingDatasetBase:
    """Stream a dataset to training with exact, equal per-rank shares.

    Args:
        source: a path, glob, URL, list of them, or a :class:`DatasetIndex`; or a list of
            :class:`shardwise.Source` to mix sources (exact quotas per epoch; see the mixing guide).
        batch_size: samples per batch of one rank.
        shuffle: shuffle units, rows in units and windows of units (seeded, per epoch).
        seed: base seed; identical inputs give identical order on every run.
        drop_last: leave out the remainder (fewer than world*workers*batch samples) or
            pad it with samples repeated from the start of the epoch's order.
        columns: columns to read (projection at read time).
        filter: a ``pyarrow.compute`` expression; per-unit match counts are counted
            (in parallel, cached) before planning, so ranks stay exactly balanced.
        batch_format: ``None`` for per-sample dicts, or ``"numpy"``, ``"torch"``, ``"arrow"``.
            ``"numpy"`` is the fastest through a DataLoader with workers: its arrays
            (:class:`NumpyColumn`) travel through one shared-memory ring per worker.
            ``"torch"`` gives numbers as tensors and columns of Python objects (strings,
            binary, lists) as numpy object arrays, as ``"numpy"`` does.
        interleave: units mixed together by one worker: memory is about ``interleave``
            decoded units per worker; more units mix better (on data sorted by label, 4
            units give batches of a few labels, all of a worker's units batches that
            each hold its whole share in proportion: a window's rows are dealt to its
            batches stratified by unit). Default: as many as fit ``shuffle_bytes``.
        shuffle_bytes: the per-worker memory that sets the default ``interleave``.
        prefetch_bytes: read-ahead budget per worker: units of the next window are read
            (on two threads) while the current one is consumed, up to this many bytes.
            With a node cache (``cache_dir``) over remote files, ``set_epoch`` also has
            the training process download each worker's first units, up to this many
            bytes per worker, while the workers start.
        rank, world_size: override detection of the training rank and world size.
        replication: ranks per model-parallel group (tensor/pipeline parallel): consecutive
            groups of ``replication`` ranks read identical batches; the plan is cut for
            ``world_size // replication`` data-parallel ranks (``ds.dp_rank``, ``ds.dp_size``).
        dp_rank, dp_size: the data-parallel rank and size given directly, for other layouts.
        device_mesh, dp_dim: a torch ``DeviceMesh`` and its data-parallel dimension (name or
            index) giving ``dp_rank``/``dp_size``. Only one of these three ways may be used.
        num_workers: the DataLoader's ``num_workers`` (0 means in-process); needed by
            :meth:`state_dict` in the training process; detected inside workers.
        on_error: ``"raise"`` or ``"skip"`` for bad records. Under ``"skip"`` every unit is
            read once before planning (in parallel, cached, like ``filter=``) so the plan
            counts only readable records; ``ds.quarantine`` says what was left out
            (count, and file, place and reason of the first ones).
        pad_to: for ``"numpy"``/``"torch"`` batches, variable-length numeric list columns
            (token ids) become 2-D arrays padded with zeros to the batch's longest row
            (``"longest"``) or to a fixed length (longer rows are cut there), each with a
            ``<column>_lengths`` column; ``None`` (default) leaves them as object arrays.
        num_threads: threads that decode, gather and convert batches when a batched
            dataset is iterated in the training process (``for batch in ds``, or a
            DataLoader with ``num_workers=0``). Default: the CPUs of this process shared
            by the node's ranks (``LOCAL_WORLD_SIZE``), at most 8.
        pin_memory: in that in-process path, pin ``"torch"`` batches (each piece of about 16k
            rows once; batches are views of it) when CUDA is available.
        cache_dir: a node-local directory shared by every rank, DataLoader worker and job of
            this node: remote units (S3, GCS, HTTP, ...) are downloaded into its ``units``
            directory at most once per node and read from there (and the dataset's index is
            kept there). Local files are read where they are. Default: no unit cache, unless
            ``cache_bytes`` is given (then ``$SHARDWISE_CACHE_DIR`` or ``~/.cache/shardwise``).
        cache_bytes: the unit cache's budget on disk (least recently used entries no process
            reads are evicted to stay under it). Default with ``cache_dir``: half the free
            space of its filesystem when the dataset is opened.
        epoch_size: samples per epoch, split among the sources by their rules (default:
            what the rules give), rounded to whole global batches.
        batching: ``"random"`` (sources mixed across the epoch) or ``"stratified"`` (every
            batch holds each source's share).
        canonical_workers: ``C``: the global batches (samples and order) are the same on
            every topology whose ``world_size * num_workers`` divides ``C``, for a fixed global
            batch ``world_size * batch_size`` (a multiple of ``C``).
        first_window: ``"heads"``: each window group's first window is every unit's
            first ``1/k`` rows (its head; ``k`` from the counts, ``batch_size``,
            ``drop_last`` and ``interleave``, the same on every topology), so the first
            batch waits for the heads alone (a worker's first, for a lead window of a few);
            their batches mix fewer rows. ``None``: whole units. Default ``"auto"``: heads
            for one shuffled Parquet dataset without a filter, ``batching="random"``,
            ``k >= 8`` and units of 1 MiB or more stored (on average), else whole units;
            decided from the format, the index and the arguments alone. A loaded state's
            epoch keeps its windows (:mod:`shardwise.loader.window_layout`; the guide).
        **open_options: passed to :func:`shardwise.index_dataset` (format, storage_options, ...).
    """

    def __init__(
        self,
        source: Any,
        *,
        batch_size: int = 1,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
        columns: Sequence[str] | None = None,
        filter: pc.Expression | None = None,
        batch_format: BatchFormat | None = None,
        interleave: int | None = None,
        shuffle_bytes: int = DEFAULT_SHUFFLE_BYTES,
        prefetch_bytes: int = 256 * 2**20,
        rank: int | None = None,
        world_size: int | None = None,
        num_workers: int | None = None,
        on_error: OnError = "raise",
        pad_to: Padding = None,
        num_threads: int | None = None,
        pin_memory: bool = False,
        replication: int | None = None,
        dp_rank: int | None = None,
        dp_size: int | None = None,
        device_mesh: Any = None,
        dp_dim: str | int | None = None,
        epoch_size: int | None = None,
        batching: str = "random",
        canonical_workers: int | None = None,
        cache_dir: str | None = None,
        cache_bytes: int | None = None,
        first_window: str | None = "auto",
        **open_options: Any,
    ) -> None:
        self.batch_format: BatchFormat | None = check_format(batch_format, pad_to)
        self.on_error = check_on_error(on_error)
        self.columns = check_columns(columns)
        self.cache = node_cache(cache_dir, cache_bytes)
        known = tuple(inspect.signature(StreamingDatasetBase.__init__).parameters)
        self.index = open_index(source, self.on_error, open_options, self.columns, known, cache_dir)
        self.mixing = mixing_for(self.index, epoch_size, batching)
        self.canonical_workers = check_int("canonical_workers", canonical_workers, 1, optional=True)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.seed, self.shuffle, self.drop_last = check_order(seed, shuffle, drop_last)
        self.filter = check_filter(filter, self.index)
        self.pad_to = check_padding(pad_to)
        self.num_threads = check_threads(num_threads)
        self.pin_memory = check_bool("pin_memory", pin_memory)
        self.shuffle_bytes = check_int("shuffle_bytes", shuffle_bytes, 1)
        self.interleave = interleave_for(self.index, interleave, self.shuffle_bytes)
        self.prefetch_bytes = check_int("prefetch_bytes", prefetch_bytes, 0)
        groups: dict[str, Any] = dict(replication=replication, dp_rank=dp_rank, dp_size=dp_size)
        groups.update(device_mesh=device_mesh, dp_dim=dp_dim)
        self.ranks: Ranks = place_ranks(rank, world_size, num_workers, groups)
        # plan from what reading yields: after the filter, and after quarantine under "skip"
        self.counts, self.quarantine = read_counts(self.index, filter, self.on_error)
        self.first_window = first_window
        self.blocks = parts.first_blocks(self)
        self.planner = parts.make_planner(self)
        self.state = parts.make_state(self)
        self.reading = parts.make_reading(self)
        self._head: HeadStart | None = None  # the training process's downloads ahead of workers
        self._memory = WindowMemory()  # the in-process path's windows, kept for the next ones
        self.hosting: Hosting | None = None  # an accelerate wrapper served exactly (.hosted)
        parts.check_streamable(self, self.planner)

    # -- where it streams to (see Ranks) ------------------------------------------------
    rank = property(lambda self: self.ranks.rank, doc="The training rank.")
    world_size = property(lambda self: self.ranks.world_size, doc="The training world size.")
    dp_rank = property(lambda self: self.ranks.dp_rank, doc="The data-parallel rank.")
    dp_size = property(lambda self: self.ranks.dp_size, doc="The data-parallel ranks.")
    num_workers = property(lambda self: self.ranks.num_workers, doc="The workers, if given.")
    epoch = property(lambda self: self.state.sync_epoch(), doc="The latest pass's epoch.")

    # -- planning -----------------------------------------------------------------------
    def topology(self, num_workers: int | None = None, world_size: int | None = None) -> Topology:
        """The topology of this dataset for ``num_workers`` workers per data-parallel rank."""
        return self.planner.topology(num_workers, world_size)

    def plan(self, num_workers: int | None = None, world_size: int | None = None) -> Plan:
        """The current epoch's plan (including a loaded resume point)."""
        return self.state.plan(self.planner, num_workers, world_size)

    def stats(self) -> dict[str, Any]:
        """This epoch's steps and samples per rank; ``"per_source"``: each source's share."""
        resumes = self.state.resumes
        start = resumes[0].topology if resumes else self.topology()
        return epoch_stats(
            self.index, self.mixing, self.counts, self.plan(), start, self.canonical_workers
        )

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (a new order); forgets a resume point of another epoch."""
        self.hosting = hosting_for(self, self.hosting)  # accelerate's wrappers call it
        self.state.set_epoch(check_int("epoch", epoch, 0), counted=wrapped())  # a wrapper counts
        workers = self.num_workers or 1
        # the node cache is filled with this epoch's first units while workers start
        plan, resuming = partial(self.plan, workers), bool(self.state.resumes)
        self._head = parts.start_head(self._head, self, plan, workers, resuming)

    def state_dict(self, consumed_batches: int | None = None) -> dict[str, Any]:
        """The position after ``consumed_batches`` batches of this rank in this epoch.

        Counted from the epoch's start (or a loaded position), in an accelerate wrapper's
        steps if one served the pass. Every rank saves the same state (ranks advance together).
        Without ``consumed_batches`` (as torchdata's ``StatefulDataLoader`` calls it, in
        each worker), the state is this worker's own position: the samples its current
        iteration yielded.
        """
        return position_of(self, consumed_batches)  # a wrapper's, after a pass it was served

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from a saved position, on this or another topology (elastic resume)."""
        self.state.load_state_dict(self.planner, state)

    def __getstate__(self) -> dict[str, Any]:  # its threads and memory stay
        hosting = pass_hosting(self, self.hosting, in_dataloader_worker())  # a spawned worker's
        return self.__dict__ | {"_head": None, "_memory": None, "hosting": hosting}

    def __setstate__(self, state: dict[str, Any]) -> None:  # a spawned worker's, say
        self.__dict__.update(state | {"_memory": WindowMemory()})  # its windows reuse their own

    def __copy__(self) -> StreamingDatasetBase:
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.state = self.state.copy()  # a copy moves on apart from the original
        return new

    def __len__(self) -> int:
        """Batches or samples per rank, for the DataLoader asking (:mod:`.collating`);
        under an accelerate wrapper, the items of every rank (see :mod:`.hosted`)."""
        if (epoch := lightning_epoch()) is not None and epoch != self.epoch:
            self.set_epoch(epoch)  # Lightning's epoch, set up (see lightning_epoch)
        h = self.hosting = hosting_for(self, self.hosting)
        return loader_length(self) if h is None else h.length(self.plan(h.workers, h.processes))

    # -- iteration ----------------------------------------------------------------------
    def iter_shard(
        self, rank: int, world_size: int, worker_id: int = 0, num_workers: int = 1
    ) -> Iterator[Any]:
        """Yield what one (rank, worker) consumes this epoch: samples or batches.

        ``rank`` and ``world_size`` are data-parallel: with ``replication=`` (or
        ``dp_rank=``/``dp_size=``, ``device_mesh=``) pass ``ds.dp_rank, ds.dp_size``; every
        training rank of a group iterates the same ``rank`` and gets the same items.
        """
        reading = replace(self.reading, memory=self._memory)
        return shard_items(
            self.state, self.planner, reading, rank, world_size, worker_id, num_workers
        )

    def __iter__(self) -> Iterator[Any]:
        placement = detect_placement(self.rank, self.world_size)
        workers, given = placement.num_workers, self.num_workers
        if given is not None and workers != given and workers > 1:
            raise PlanError(f"num_workers={given} was given but the DataLoader runs {workers}")
        worker = in_dataloader_worker()
        if worker:
            setup_worker(self.batch_format, ring_bytes_for(self.index.units, self.batch_size))
        hosting = pass_hosting(self, self.hosting, worker)  # this pass's wrapper, if any
        if hosting is not None:
            return hosted_items(self, hosting, placement)
        items = self.iter_shard(self.dp_rank, self.dp_size, placement.worker_id, workers)
        return loader_items(self, items)


def __getattr__(name: str) -> Any:  # its former home: old imports and pickles still resolve
    if name != "StreamingDataset":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return import_module("shardwise.loader.iterable").StreamingDataset
