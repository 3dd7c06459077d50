"""``StreamingDataset``: exact, equal, deterministic, resumable streaming for training.

Framework-agnostic at its core: :meth:`StreamingDataset.iter_shard` yields the samples
(or ready batches) of one (rank, worker) from the epoch's :class:`~shardwise.plan.EpochPlan`.
With torch installed the class is also a ``torch.utils.data.IterableDataset``: iterating
it inside a ``DataLoader`` detects the rank from ``torch.distributed`` (or ``RANK`` /
``WORLD_SIZE``) and the worker from ``get_worker_info()``.

Per-sample mode (``batch_format=None``) yields dicts; use ``DataLoader(ds, batch_size=<the
same batch_size>)``. Batched mode (``"numpy"``, ``"torch"``, ``"arrow"``) yields whole
per-rank batches: iterate it directly (:mod:`shardwise.loader.threaded`) or in
``DataLoader(ds, batch_size=None)``."""

from __future__ import annotations

import inspect
import time
from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np
import pyarrow.compute as pc

from shardwise.errors import ConfigError, PlanError
from shardwise.formats import OnError, check_on_error
from shardwise.loader._args import check_bool, check_columns, check_filter, check_int, check_threads
from shardwise.loader.cached import node_cache
from shardwise.loader.channel import Seen, in_dataloader_worker
from shardwise.loader.convert import Padding, check_padding
from shardwise.loader.groups import data_parallel
from shardwise.loader.headstart import HeadStart, head_start
from shardwise.loader.memory import WindowMemory
from shardwise.loader.placement import detect_placement
from shardwise.loader.position import Position
from shardwise.loader.process import setup_worker
from shardwise.loader.sources import Source, check_not_empty, open_reader, open_source, read_counts
from shardwise.loader.state import LoaderState
from shardwise.loader.stats import epoch_stats, mixing_for
from shardwise.loader.stream import BatchFormat, Reading, serial_items
from shardwise.loader.threaded import threaded_batches
from shardwise.loader.transport import NumpyColumn
from shardwise.loader.wrappers import check_not_resharded
from shardwise.plan import Plan, Topology, auto_interleave, make_plan
from shardwise.plan.compose import WindowSource

__all__ = ["NumpyColumn", "StreamingDatasetBase"]


class StreamingDatasetBase(LoaderState):
    """Stream a dataset to training with exact, equal per-rank shares.

    Args:
        source: a path, glob, URL, list of them, or a :class:`DatasetIndex`; or a list of
            :class:`shardwise.Source` to mix sources (exact quotas per epoch, see README).
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
        **open_options: passed to :func:`shardwise.open_dataset` (format, storage_options, ...).
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
        shuffle_bytes: int = 512 * 2**20,
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
        **open_options: Any,
    ) -> None:
        if batch_format not in (None, "numpy", "torch", "arrow"):
            raise ConfigError(
                f"batch_format must be None, 'numpy', 'torch' or 'arrow', got {batch_format!r}"
            )
        self.on_error = check_on_error(on_error)
        if pad_to is not None and batch_format not in ("numpy", "torch"):
            raise ConfigError(
                f"pad_to={pad_to!r} pads numpy or torch batches; batch_format is {batch_format!r}"
            )
        self.columns = check_columns(columns)
        self.cache = node_cache(cache_dir, cache_bytes)
        self._open(source, cache_dir, open_options, epoch_size, batching)
        self.canonical_workers = check_int("canonical_workers", canonical_workers, 1, optional=True)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.shuffle, self.drop_last = (
            check_bool("shuffle", shuffle),
            check_bool("drop_last", drop_last),
        )
        self.seed = check_int("seed", seed, 0)
        self.filter = check_filter(
            filter, [ix.schema for ix in getattr(self.index, "indexes", [self.index])]
        )
        self.batch_format = batch_format
        self.pad_to = check_padding(pad_to)
        self.num_threads = check_threads(num_threads)
        self.pin_memory = bool(pin_memory)
        self.shuffle_bytes = check_int("shuffle_bytes", shuffle_bytes, 1)
        interleave = check_int("interleave", interleave, 1, optional=True)
        self.interleave = interleave if interleave is not None else self._auto_interleave()
        self.prefetch_bytes = check_int("prefetch_bytes", prefetch_bytes, 0)
        self._place(
            rank,
            world_size,
            num_workers,
            dict(
                replication=replication,
                dp_rank=dp_rank,
                dp_size=dp_size,
                device_mesh=device_mesh,
                dp_dim=dp_dim,
            ),
        )
        # plan from what reading yields: after the filter, and after quarantine under "skip"
        self.counts, self.quarantine = read_counts(self.index, filter, self.on_error)
        self._start_state()
        self._head: HeadStart | None = None  # the training process's downloads ahead of its workers
        self._memory = WindowMemory()  # the in-process path's windows, kept for the next ones
        open_reader(self.index, self.columns, self.filter, on_error)  # validate columns now
        self.topology(1)  # validate batch_size etc. now
        check_not_empty(self.index, self.counts, filter, self.quarantine)

    def _open(
        self,
        source: Any,
        cache_dir: str | None,
        open_options: dict[str, Any],
        epoch_size: int | None,
        batching: str,
    ) -> None:
        """The index of the source (or of every :class:`Source`) and the mixing rules."""
        sources = isinstance(source, Source) or (
            isinstance(source, (list, tuple)) and any(isinstance(s, Source) for s in source)
        )
        if cache_dir is not None and not sources:  # the index is kept there too
            open_options = dict(open_options, cache_dir=cache_dir)
        self.index = open_source(
            source,
            self.on_error,
            open_options,
            self.columns,
            tuple(inspect.signature(StreamingDatasetBase.__init__).parameters),
        )
        self.mixing = mixing_for(self.index, epoch_size, batching)

    def _place(
        self,
        rank: int | None,
        world_size: int | None,
        num_workers: int | None,
        groups: dict[str, Any],
    ) -> None:
        """The training rank and world size (given or detected), the data-parallel ones the
        plan is cut for, and the DataLoader workers if given."""
        placement = detect_placement(rank, world_size, 0, 1)
        self.rank, self.world_size = placement.rank, placement.world_size
        dp = data_parallel(self.rank, self.world_size, **groups)
        self.dp_rank, self.dp_size = dp.rank, dp.size  # what the plan is cut for
        num_workers = check_int("num_workers", num_workers, 0, optional=True)
        self.num_workers = max(1, num_workers) if num_workers is not None else None
        self._explicit_workers = num_workers is not None

    def _auto_interleave(self) -> int:
        """As many units as fit ``shuffle_bytes`` once decoded (taken as twice their
        stored size), between 1 and ``shardwise.plan.budget.MAX_AUTO_INTERLEAVE``."""
        return auto_interleave(
            np.array([u.num_bytes for u in self.index.units]), self.shuffle_bytes
        )

    # -- planning ---------------------------------------------------------------------
    def topology(self, num_workers: int | None = None, world_size: int | None = None) -> Topology:
        """The topology of this dataset for ``num_workers`` workers per data-parallel rank."""
        return Topology(
            world_size or self.dp_size,
            num_workers or self.num_workers or 1,
            self.batch_size,
            self.drop_last,
            self.interleave,
        )

    def plan(self, num_workers: int | None = None, world_size: int | None = None) -> Plan:
        """The current epoch's plan (including a loaded resume point)."""
        return make_plan(
            self.counts,
            self.topology(num_workers, world_size),
            seed=self.seed,
            epoch=self.epoch,
            shuffle=self.shuffle,
            resumes=self._resumes,
            mixing=self.mixing,
            canonical_workers=self.canonical_workers,
        )

    def stats(self) -> dict[str, Any]:
        """This epoch's numbers: steps and samples per rank, and ``"per_source"``: each
        source's rule and the exact samples this epoch takes from it."""
        start = self._resumes[0].topology if self._resumes else self.topology()
        return epoch_stats(
            self.index, self.mixing, self.counts, self.plan(), start, self.canonical_workers
        )

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (a new order); forgets a resume point of another epoch."""
        epoch = check_int("epoch", epoch, 0)
        check_not_resharded()  # HF Accelerate's wrappers call set_epoch before the first batch
        if epoch != self.epoch:
            self._resumes = []
        self.epoch = epoch
        self._publish()
        self._head_start()

    def _head_start(self) -> None:
        """Fill the node cache with this epoch's first units while workers start (see
        :func:`~shardwise.loader.headstart.head_start`)."""
        workers = self.num_workers or 1
        self._head = head_start(
            self._head,
            self.index,
            self.cache,
            partial(self.plan, workers),
            self.dp_rank,
            workers,
            self.prefetch_bytes,
            bool(self._resumes),
        )

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__ | {"_head": None, "_memory": None}  # its threads and memory stay here

    def __len__(self) -> int:
        """Batches per rank (batched mode) or samples per rank (per-sample mode)."""
        p = self.plan()
        return p.batches_per_rank if self.batch_format else p.samples_per_rank

    # -- iteration --------------------------------------------------------------------
    def iter_shard(
        self, rank: int, world_size: int, worker_id: int = 0, num_workers: int = 1
    ) -> Iterator[Any]:
        """Yield what one (rank, worker) consumes this epoch: samples or batches.

        ``rank`` and ``world_size`` are data-parallel: with ``replication=`` (or
        ``dp_rank=``/``dp_size=``, ``device_mesh=``) pass ``ds.dp_rank, ds.dp_size``; every
        training rank of a group iterates the same ``rank`` and gets the same items.
        """
        self._begin_pass(rank, worker_id)  # the epoch set, or the one after the last pass
        if in_dataloader_worker():
            self._channel.announce(world_size, num_workers, self.epoch)
        else:
            self._seen = Seen(world_size, num_workers, time.time(), self.epoch)
        wp = self.plan(num_workers, world_size).worker(rank, worker_id)
        here = self._start_at(wp, Position(self.epoch, rank, world_size, worker_id, num_workers))
        yielded = here.samples
        where = here.where()
        for item, n in self._items(wp):
            yielded += n  # counted as handed over: a state taken now includes this item
            self._position = Position(*where, yielded)
            yield item

    def _items(self, wp: WindowSource) -> Iterator[tuple[Any, int]]:
        """Samples or batches, each with its number of samples: batches in the training
        process on threads of its own, everything else as a DataLoader worker does."""
        reading = Reading(
            self.index,
            self.columns,
            self.filter,
            self.on_error,
            self.batch_format,
            self.batch_size,
            self.interleave,
            self.prefetch_bytes,
            self.pad_to,
            self.num_threads,
            self.pin_memory,
            self.cache,
            self._memory,
        )
        if self.batch_format is not None and not in_dataloader_worker():
            return threaded_batches(reading, wp)
        return serial_items(reading, wp)

    def __iter__(self) -> Iterator[Any]:
        placement = detect_placement(self.rank, self.world_size)
        if (
            self._explicit_workers
            and placement.num_workers != (self.num_workers or 1)
            and placement.num_workers > 1
        ):
            raise PlanError(
                f"num_workers={self.num_workers} was given but the DataLoader runs "
                f"{placement.num_workers} workers"
            )
        if in_dataloader_worker():
            setup_worker(self.batch_format)
        return self.iter_shard(
            self.dp_rank, self.dp_size, placement.worker_id, placement.num_workers
        )
