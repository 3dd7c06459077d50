"""NVIDIA DALI: one external source per DALI Python worker, each over its own shards.

DALI's parallel external source does not tell a source which worker runs it, but it
runs every *iterable* source in a dedicated worker process of its own (sources are
assigned to workers in turn). :class:`DaliInput` therefore hands one rank ``K``
picklable iterables, one per worker (``py_num_workers=K``): source ``k`` streams the
(rank, k) piece of the epoch's :class:`~shardwise.plan.EpochPlan` and yields exactly
``per_worker`` samples per iteration (``batch=True``). Pieces are consecutive, equal
and disjoint across ranks x workers, so every source on every rank yields the same
number of batches and raises ``StopIteration`` on the same iteration: DALI pipelines
on all ranks run the same number of iterations. :meth:`DaliInput.merge` joins the
``K`` outputs of an iteration into the rank's batch of ``K * per_worker`` samples.

Epochs: every ``iter()`` of a source starts the next epoch (``cycle="raise"``: DALI
calls ``iter()`` again after ``pipe.reset()``, which its iterators do at an epoch's
end), counted per process from :meth:`DaliInput.set_epoch`'s epoch. The training process
counts merged iterations (after an epoch's ``iterations``, the next ``merge`` starts the next
epoch), so ``epoch``, ``iterations`` and ``state_dict`` follow the sources. Resume:
``state_dict()`` after some iterations, ``load_state_dict`` before building the pipeline
(DALI's own checkpointing does not cover iterable sources).

``DaliSource`` is the former name of ``DaliInput`` (``shardwise.Source`` is the user's
source of a mix); it still works and warns.
"""

from __future__ import annotations

import atexit
import copy
import multiprocessing.util
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

from shardwise._optional import require
from shardwise.errors import ConfigError, PlanError
from shardwise.integrations._arrays import column_spec, concat_outputs
from shardwise.integrations._dali_feed import WorkerFeed
from shardwise.loader import StreamingDatasetBase

__all__ = ["DaliInput", "DaliSource", "WorkerFeed", "WorkerSource"]


WorkerSource = WorkerFeed  # its name in 0.1; a deprecated alias, kept for one release


class DaliInput:
    """One rank's ``K`` DALI external sources over a dataset (WebDataset shards or any format).

    Args:
        source: a path, glob, URL (``s3://...``), list of them, or a ``DatasetIndex``.
        per_worker: samples every source adds to each batch; the DALI pipeline's
            ``batch_size``. The rank's merged batch holds ``num_workers * per_worker``.
        num_workers: sources, one per DALI Python worker (``py_num_workers``).
        columns: columns to output, in order (WebDataset fields like ``"jpg"``, ``"cls"``,
            or ``"__key__"``); binary and string columns arrive as ``uint8`` arrays.
        rank, world_size: this rank; default from ``torch.distributed`` or ``RANK`` /
            ``WORLD_SIZE``, else 0 of 1.
        seed: base seed: the same seed and epoch give the same order on every run.
        shuffle: shuffle shards, samples in shards and windows of shards per epoch.
        drop_last: ``True`` leaves out the epoch's remainder, fewer than
            ``world_size * num_workers * per_worker`` samples (a different one each
            epoch); ``False`` pads it with samples repeated from the start of the
            epoch's order so every sample is seen at least once.
        **options: passed to :class:`~shardwise.loader.StreamingDataset` (``filter``,
            ``on_error``, ``interleave``, ``storage_options``, ``format``, ``replication``
            for model-parallel groups, ...).

    Raises:
        MissingExtraError: DALI is not installed.
    """

    def __init__(
        self,
        source: Any,
        *,
        per_worker: int,
        num_workers: int,
        columns: Sequence[str],
        rank: int | None = None,
        world_size: int | None = None,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        **options: Any,
    ) -> None:
        require("nvidia.dali", type(self).__name__)
        for name, value in (("per_worker", per_worker), ("num_workers", num_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(columns, str) or not columns:
            raise ConfigError(f"columns must be a non-empty list of column names, got {columns!r}")
        self.columns = list(columns)
        self.num_workers, self.per_worker = num_workers, per_worker
        options.setdefault("num_threads", 1)  # each DALI worker is a process of its own
        self.dataset = StreamingDatasetBase(
            source,
            batch_size=per_worker,
            batch_format="arrow",
            num_workers=num_workers,
            columns=self.columns,
            rank=rank,
            world_size=world_size,
            seed=seed,
            shuffle=shuffle,
            drop_last=drop_last,
            **options,
        )
        self.rank, self.world_size = self.dataset.rank, self.dataset.world_size
        schema = self.dataset.index.schema
        self.specs = {c: column_spec(c, schema.field(c).type) for c in self.columns}
        self._merged = 0  # iterations of the current epoch merged in this process

    # -- the sources ------------------------------------------------------------------
    def sources(self) -> list[WorkerFeed]:
        """``num_workers`` fresh sources from the current epoch (and loaded state)."""
        return [
            WorkerFeed(copy.copy(self.dataset), k, self.num_workers, self.columns)
            for k in range(self.num_workers)
        ]

    def external_sources(self, **kwargs: Any) -> list[tuple[Any, ...]]:
        """Call ``nvidia.dali.fn.external_source`` once per source (inside a pipeline definition).

        Defaults: ``batch=True, parallel=True, cycle="raise"``, ``num_outputs``, ``dtype``
        and ``ndim`` from the columns; ``kwargs`` override them.

        Returns:
            Per source, a tuple of data nodes, one per column.

        Raises:
            ConfigError: ``batch=False``, or the pipeline's ``batch_size`` is smaller than
                ``per_worker`` (DALI would refuse the sources' batches at its first run).
        """
        fn = require("nvidia.dali.fn", "DaliInput.external_sources")
        self._check_pipeline(kwargs)
        _shutdown_pipelines_before_joining_workers()
        types = require("nvidia.dali.types", "DaliInput.external_sources")
        opts: dict[str, Any] = {
            "batch": True,
            "parallel": True,
            "cycle": "raise",
            "num_outputs": len(self.columns),
            "dtype": [types.to_dali_type(self.specs[c][0]) for c in self.columns],
            "ndim": [self.specs[c][1] for c in self.columns],
        }
        opts.update(kwargs)
        return [tuple(fn.external_source(source=s, **opts)) for s in self.sources()]

    def _check_pipeline(self, kwargs: Mapping[str, Any]) -> None:
        """The pipeline being defined takes every source's batch of ``per_worker``."""
        if not kwargs.get("batch", True):
            raise ConfigError("DaliInput's sources return whole batches: keep batch=True")
        pipeline = require("nvidia.dali.pipeline", "DaliInput.external_sources").Pipeline
        current = pipeline.current()
        if current is not None and current.max_batch_size < self.per_worker:
            raise ConfigError(
                f"the pipeline's batch_size={current.max_batch_size} is smaller than "
                f"per_worker={self.per_worker}, the samples each source adds to a batch: "
                "give the pipeline batch_size=src.per_worker"
            )

    # -- epochs, sizes and resume -----------------------------------------------------
    @property
    def epoch(self) -> int:
        """The epoch of the iterations being merged (the next one's once an epoch's
        ``iterations`` are merged and the next iteration is)."""
        return self.dataset.epoch

    def set_epoch(self, epoch: int) -> None:
        """The epoch the sources made after this start with (before building the pipeline)."""
        self.dataset.set_epoch(epoch)
        self._merged = 0

    @property
    def iterations(self) -> int:
        """Iterations of the current epoch, the same on every rank (from a resume point, if
        loaded)."""
        return self.dataset.plan().batches_per_rank // self.num_workers

    @property
    def batch_size(self) -> int:
        """The rank's merged batch: ``num_workers * per_worker`` samples."""
        return self.num_workers * self.per_worker

    def state_dict(self, iterations: int | None = None) -> dict[str, Any]:
        """The position after ``iterations`` pipeline iterations of the current epoch
        (default: the iterations merged so far in it); it names the epoch."""
        if iterations is None:
            iterations = self._merged
        if not 0 <= iterations <= self.iterations:
            raise PlanError(f"iterations must be in [0, {self.iterations}], got {iterations}")
        return self.dataset.state_dict(consumed_batches=iterations * self.num_workers)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue an epoch from :meth:`state_dict` (before building the pipeline); also on
        another number of ranks, workers or ``per_worker`` (what was consumed is not repeated).
        A state that leaves no iteration of its epoch (saved at its end) starts the next one:
        DALI's framework iterators refuse a pipeline whose first epoch is empty."""
        self.dataset.load_state_dict(state)
        if self.iterations == 0:
            self.dataset.set_epoch(self.dataset.epoch + 1)
        self._merged = 0

    def _count_iteration(self) -> None:
        """One more iteration merged: the first of the next epoch once this one's are done
        (the sources start it after ``pipe.reset()``, from its start)."""
        if self._merged >= self.iterations:
            self.dataset.set_epoch(self.dataset.epoch + 1)
            self._merged = 0
        self._merged += 1

    # -- outputs ----------------------------------------------------------------------
    def merge(self, outputs: Sequence[Any] | Mapping[str, Any]) -> list[Any] | dict[str, Any]:
        """Join one iteration's outputs of the ``num_workers`` sources into the rank's batch.

        Args:
            outputs: ``pipe.run()``'s outputs, source-major (every output of source 0, then
                of source 1, ...), as DALI ``TensorList``s, numpy arrays or torch tensors;
                or a mapping (e.g. a DALI framework iterator's dict) whose keys are
                :meth:`output_names`.

        Returns:
            A list with one merged output per source output (a mapping: a dict keyed by
            the base names), each a numpy array or torch tensor when the parts are dense
            (a list of per-sample arrays otherwise), source 0's samples first.
        """
        k = self.num_workers
        self._count_iteration()
        if isinstance(outputs, Mapping):
            names = list(dict.fromkeys(key.rsplit("_w", 1)[0] for key in outputs))
            return {n: concat_outputs([outputs[f"{n}_w{i}"] for i in range(k)]) for n in names}
        outs = list(outputs)
        if not outs or len(outs) % k:
            raise ConfigError(
                f"expected the outputs of {k} sources (a multiple of {k}), got {len(outs)}"
            )
        per = len(outs) // k
        return [concat_outputs([outs[i * per + j] for i in range(k)]) for j in range(per)]

    def output_names(self, names: Sequence[str]) -> list[str]:
        """Names of every source's outputs for a framework iterator's ``output_map``:
        ``names`` per source, suffixed ``_w<k>``, in the order :meth:`merge` expects."""
        return [f"{n}_w{i}" for i in range(self.num_workers) for n in names]


class DaliSource(DaliInput):
    """Deprecated name of :class:`DaliInput` (``Source`` names the sources of a mix)."""

    def __init__(self, source: Any, **kwargs: Any) -> None:
        msg = "shardwise.integrations.dali.DaliSource is now DaliInput; the old name will go"
        warnings.warn(msg, DeprecationWarning, stacklevel=2)
        super().__init__(source, **kwargs)


_EXIT_HOOKED = False


def _shutdown_pipelines_before_joining_workers() -> None:
    """At exit, shut DALI pipelines down before ``multiprocessing`` joins its children.

    DALI's Python workers are non-daemonic and leave only when their pipeline shuts down,
    which DALI does in an exit handler. Exit handlers run last-registered first, so when
    ``multiprocessing.util`` (which joins every child at exit) is first imported after
    ``nvidia.dali`` -- as reading ``s3://`` through s3fs does -- a script whose pipeline is
    still alive at exit hangs there. Registering DALI's shutdown again, now that
    ``multiprocessing.util`` is imported (at the top of this module), puts it first.
    """
    global _EXIT_HOOKED
    shutdown = getattr(require("nvidia.dali.pipeline"), "_shutdown_pipelines", None)
    if not _EXIT_HOOKED and shutdown is not None and multiprocessing.util is not None:
        atexit.register(shutdown)
        _EXIT_HOOKED = True
