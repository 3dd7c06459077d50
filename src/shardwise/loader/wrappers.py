"""Recognise HF Accelerate's wrappers around a dataset, so that it can serve them exactly.

HF Accelerate (and so HF ``Trainer``, which prepares its dataloader with it) treats every
``IterableDataset`` as unsharded:

- with ``dispatch_batches`` (its default for iterable datasets) a ``DataLoaderDispatcher``
  iterates the DataLoader on rank 0 alone and gives every rank its slice of each step's
  batches (``num_processes`` consecutive batches, or one batch split with ``split_batches``);
- without it, an ``IterableDatasetShard`` makes every rank iterate the dataset and keep its
  slice of every group of ``batch_size * num_processes`` items.

Both wrappers call the dataset's ``set_epoch`` from their ``__iter__`` in the training
process before the DataLoader's iterator (and its workers) exist, and reach the dataset's
``len`` through their own. :func:`detect_hosting` reads the callers there and returns a
:class:`Hosting` that the dataset keeps (it is pickled into its DataLoader workers) and
serves by (:mod:`shardwise.loader.hosted`): the whole epoch from rank 0 under a dispatcher,
each rank's own items at the positions the shard keeps otherwise.

This relies on accelerate 1.x: the classes ``accelerate.data_loader.DataLoaderDispatcher``,
``DataLoaderShard`` and ``IterableDatasetShard`` and their attributes ``state``,
``split_batches``, ``skip_batches``, ``batch_size``, ``num_processes``, ``process_index``
and ``dataset``; it is tested with the version pinned in constraints.txt. One change is
made to accelerate's object: an ``IterableDatasetShard`` over a batched dataset
(``DataLoader(batch_size=None)``) has ``batch_size=None``, on which accelerate itself fails
(``None * num_processes``); it is set to 1 (each item is a whole batch). A wrapper over a
single process is served too (its skipped batches are placeholders, not read); its
dispatcher still broadcasts and measures tensors only.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass
from types import FrameType
from typing import Any

from shardwise.errors import ConfigError

__all__ = ["Hosting", "detect_hosting", "hosting_of", "lightning_epoch", "pass_hosting", "wrapped"]

_DISPATCHER, _SHARD, _LOADER = "DataLoaderDispatcher", "IterableDatasetShard", "DataLoaderShard"
_WRAPPERS = (_DISPATCHER, _SHARD, _LOADER)
_FIX = (
    "shardwise.integrations.hf.ShardwiseTrainer (HF Trainer) or ShardwiseLoader (Accelerate) "
    "keep the dataset's own split exactly"
)


@dataclass(frozen=True)
class Hosting:
    """How an accelerate wrapper takes this dataset's items.

    Attributes:
        wrapper: the wrapper's class, for messages.
        dispatch: rank 0 alone iterates the DataLoader and dispatches its batches.
        processes, process_index: the wrapper's processes and this one's index.
        split: ``split_batches``: one batch of the DataLoader is split among the processes.
        samples: the dataset's items are samples (per-sample mode, or a batched dataset cut
            into its rows because the DataLoader batches with a collator), else batches.
        per_process: items each process keeps of a group (shard only).
        loader_batch: samples per DataLoader item (its ``batch_size``, or the dataset's).
        skip_batches: batches the wrapper discards at the start of this pass (accelerate's
            ``skip_first_batches``).
        workers: the DataLoader's workers per process (1 for none).
    """

    wrapper: str
    dispatch: bool
    processes: int
    process_index: int
    split: bool
    samples: bool
    per_process: int
    loader_batch: int
    skip_batches: int
    workers: int

    def length(self, plan: Any) -> int:
        """The dataset's ``len`` the wrapper expects: every rank's items of the ``plan``."""
        return int(
            self.processes * (plan.samples_per_rank if self.samples else plan.batches_per_rank)
        )


def detect_hosting(dataset: Any, previous: Hosting | None) -> Hosting | None:
    """The wrapper among the callers of the dataset's ``set_epoch`` or ``__len__`` (the
    caller of the caller of this function), else ``previous``.

    Raises:
        ConfigError: for a wrapper that cannot be served exactly, naming it and the fix.
    """
    if "accelerate" not in sys.modules:
        return previous
    return _hosting(dataset, _callers(sys._getframe(2)), previous)


def wrapped() -> bool:
    """Whether an accelerate wrapper calls (the caller of this function's caller)."""
    return "accelerate" in sys.modules and bool(_callers(sys._getframe(2)))


def hosting_of(loader: Any) -> tuple[Any, Hosting | None]:
    """(the dataset, how it is served) of a dataloader ``accelerator.prepare`` returned:
    ``None`` for one it returned as it was."""
    cls = type(loader)
    ours = cls.__module__.startswith("accelerate.")
    if ours and cls.__name__ == _DISPATCHER:
        return loader.dataset, _dispatched(loader.dataset, loader)
    shard: Any = getattr(loader, "dataset", None)
    if ours and cls.__name__ == _LOADER and type(shard).__name__ == _SHARD:
        return shard.dataset, _sharded(shard.dataset, shard, 0, loader.num_workers or 0)
    return shard, None


def pass_hosting(dataset: Any, last: Hosting | None, worker: bool) -> Hosting | None:
    """The wrapper that started the pass being started now, or ``None`` for a plain
    DataLoader (or loop): the one whose ``__iter__`` is on the stack, read at the pass's
    start in the training process (no DataLoader workers), in a worker forked by that
    ``__iter__`` (a forked process keeps its parent's frames), or when a spawned worker's
    copy is pickled there (the ``last`` a wrapper's ``set_epoch`` found, which a ``worker``
    whose stack does not reach back to its DataLoader keeps). So a dataset served to a
    wrapper once (an evaluation loop over the training dataset, say) is not served that way
    to the next plain DataLoader."""
    if "accelerate" not in sys.modules:
        return None
    frame = sys._getframe(1)
    if worker and not _forked(frame):
        return last
    found = _callers(frame, depth=None)
    hosting = _hosting(dataset, found, None)
    return last if hosting is None and found else hosting


def _forked(frame: FrameType | None) -> bool:
    """Whether the stack reaches back to the DataLoader iterator that started this worker."""
    while frame is not None:
        if type(frame.f_locals.get("self")).__name__.endswith("MultiProcessingDataLoaderIter"):
            return True
        frame = frame.f_back
    return False


def _hosting(dataset: Any, found: dict[str, Any], previous: Hosting | None) -> Hosting | None:
    hosting = previous
    if _DISPATCHER in found:
        hosting = _dispatched(dataset, found[_DISPATCHER])
    elif _SHARD in found:
        loader = found.get(_LOADER)
        skip, workers = getattr(loader, "skip_batches", 0), getattr(loader, "num_workers", 0)
        hosting = _sharded(dataset, found[_SHARD], skip or 0, workers or 0)
    stateful = [w for w in found.values() if getattr(w, "use_stateful_dataloader", False)]
    if hosting is not None and stateful:
        _refuse(
            stateful[0],
            "with use_stateful_dataloader=True it would save and restore positions of the "
            "dataset that do not describe what the wrapper consumed (save the epoch and step "
            "instead and resume with accelerate's skip_first_batches)",
        )
    return hosting


def _callers(frame: FrameType | None, depth: int | None = 8) -> dict[str, Any]:
    """accelerate's wrappers among ``depth`` callers (all with ``None``), by class name, the
    nearest of each (accelerate's adapters report their base DataLoader as ``__class__``,
    so their type is read)."""
    found: dict[str, Any] = {}
    for _ in itertools.count() if depth is None else range(depth):
        if frame is None:
            break
        obj = frame.f_locals.get("self")
        cls = type(obj)
        if cls.__module__.startswith("accelerate.") and cls.__name__ in _WRAPPERS:
            found.setdefault(cls.__name__, obj)
        frame = frame.f_back
    return found


def _name(wrapper: Any) -> str:
    return f"{type(wrapper).__module__}.{type(wrapper).__name__}"


def _dispatched(dataset: Any, wrapper: Any) -> Hosting | None:
    state = wrapper.state
    processes, split = int(state.num_processes), bool(wrapper.split_batches)
    if wrapper.dataset is not dataset and processes <= 1:
        return None  # one process takes what it is given: nothing to serve
    _check_inner(dataset, wrapper.dataset, wrapper)
    if getattr(wrapper, "submesh_tp", None) is not None and processes > 1:
        _refuse(wrapper, "with a tensor-parallel device mesh it gives every rank the same batch")
    if dataset.batch_format is not None and dataset.pad_to == "longest" and processes > 1:
        _refuse(
            wrapper,
            'it concatenates the batches of a step, which pad_to="longest" makes of different '
            "widths (give pad_to=<a length>, or dispatch_batches=False)",
        )
    samples, loader_batch = _loader_batch(dataset, wrapper.batch_size, processes, split, wrapper)
    return Hosting(
        wrapper=_name(wrapper),
        dispatch=True,
        processes=processes,
        process_index=int(state.process_index),
        split=split,
        samples=samples,
        per_process=0,
        loader_batch=loader_batch,
        skip_batches=int(getattr(wrapper, "skip_batches", 0) or 0),
        workers=max(1, int(wrapper.num_workers or 0)),
    )


def _sharded(dataset: Any, shard: Any, skip_batches: int, workers: int) -> Hosting | None:
    processes, split = int(shard.num_processes), bool(shard.split_batches)
    if processes <= 1:
        return None
    _check_inner(dataset, shard.dataset, shard)
    if shard.batch_size is None and dataset.batch_format is not None and not split:
        shard.batch_size = 1  # each item is a whole batch (accelerate fails on None)
    if shard.batch_size is None:
        _refuse(shard, "split_batches=True needs a DataLoader batch_size")
    samples, loader_batch = _loader_batch(dataset, shard.batch_size, processes, split, shard)
    per = loader_batch if samples else 1
    return Hosting(
        wrapper=_name(shard),
        dispatch=False,
        processes=processes,
        process_index=int(shard.process_index),
        split=split,
        samples=samples,
        per_process=per,
        loader_batch=loader_batch,
        skip_batches=int(skip_batches),
        workers=max(1, int(workers)),
    )


def _loader_batch(
    dataset: Any, batch_size: int | None, processes: int, split: bool, wrapper: Any
) -> tuple[bool, int]:
    """(whether the dataset serves samples, samples per process per DataLoader batch): the
    DataLoader's ``batch_size`` must give every process a batch of the dataset's size."""
    b = dataset.batch_size
    if dataset.batch_format is not None and batch_size in (None, 1) and not split:
        return False, b  # whole batches (an IterableDatasetShard's 1 is one batch)
    want = b * processes if split else b
    if batch_size != want:
        _refuse(
            wrapper,
            f"each process must get batches of the dataset's batch_size={b}: give the "
            f"DataLoader batch_size={want}"
            + ("" if split or not dataset.batch_format else " (or None for a batched dataset)")
            + f", not {batch_size} (under HF Trainer: per_device_train_batch_size and "
            f"per_device_eval_batch_size={want})",
        )
    return True, b


def _check_inner(dataset: Any, inner: Any, wrapper: Any) -> None:
    if inner is not dataset:
        _refuse(wrapper, f"it wraps {type(inner).__name__}, not the StreamingDataset itself")


def _refuse(wrapper: Any, why: str) -> None:
    raise ConfigError(
        f"a StreamingDataset is wrapped by {_name(wrapper)}, which shardwise cannot serve "
        f"exactly here: {why}. {_FIX}."
    )


def lightning_epoch() -> int | None:
    """The epoch of the Lightning fit loop asking for the dataset's length, if one is.

    Lightning tells only samplers the epoch, never an iterable dataset; its fit loop asks
    the DataLoader's length as it sets up (``setup_data``; a validation inside asks too,
    and must not set the epoch), before any worker starts. A job resumed from a checkpoint
    saved at an epoch's end restores no loader state (Lightning restores one only
    mid-epoch), so without this its next pass would be epoch 0's order again."""
    if "lightning" not in sys.modules and "pytorch_lightning" not in sys.modules:
        return None
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        obj = frame.f_locals.get("self")
        cls = type(obj)
        if cls.__name__ == "_FitLoop" and "lightning" in cls.__module__:
            return _fit_epoch(obj) if frame.f_code.co_name == "setup_data" else None
        frame = frame.f_back
    return None


def _fit_epoch(loop: Any) -> int | None:
    """The epoch Lightning's fit loop trains next. Restarted from a checkpoint saved at an
    epoch's last step, it counts the rest of the restored pass (nothing) as the next epoch,
    so that next epoch starts now (the restored workers' finished positions are dropped,
    :meth:`~shardwise.loader.state.LoaderState.load_state_dict`)."""
    try:
        epoch = int(loop.epoch_progress.current.processed)
        last = bool(loop.restarting and loop.epoch_loop.batch_progress.is_last_batch)
    except (AttributeError, TypeError, ValueError):
        return None
    return epoch + 1 if last else epoch
