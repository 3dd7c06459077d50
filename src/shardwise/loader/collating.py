"""A dataset in a plain PyTorch DataLoader: its worker count, and batching by a collator.

``len(dataset)`` is what a DataLoader's own ``len`` (and so Lightning's and HF Trainer's
epoch length) is made of, yet the DataLoader never tells the dataset how many workers it
runs, and the plan's batches per rank depend on it (a rank's samples are dealt to its
workers, each yielding whole batches). :func:`calling_loader` finds the DataLoader among
the callers of the dataset's ``__len__`` or ``__iter__`` (``DataLoader.__len__`` calls
``len(self.dataset)``; its iterator calls ``iter``), so the length is the plan of the
DataLoader's own workers.

A batched dataset (``batch_format`` set) belongs in ``DataLoader(batch_size=None)``. In a
DataLoader that batches (HF ``Trainer``'s, with ``per_device_train_batch_size``), each of
its batches would become one sample of a batch of batches; so such a dataset serves the
rows of its batches instead (:func:`rows_of`), which the collator stacks into the same
batches again, and a DataLoader ``batch_size`` other than the dataset's is refused (so it is for a
dataset of samples): where the DataLoader is among the callers, and else (in its workers)
at the first item its fetcher takes, by the size of the fetcher's batch. Whether
the DataLoader batches is read from its fetcher (``auto_collation``), which calls the
dataset's ``iter`` in the training process and in every DataLoader worker alike. Accelerate's
wrappers over several processes are served by :mod:`.hosted` instead.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

from shardwise.errors import ConfigError

__all__ = [
    "calling_loader",
    "check_loader_batch",
    "collated",
    "fetched_batch_size",
    "loader_items",
    "loader_length",
    "rows_of",
]

_DEPTH = 8  # callers looked at


def _callers(start: int) -> Iterator[Any]:
    frame: FrameType | None = sys._getframe(start + 1)
    for _ in range(_DEPTH):
        if frame is None:
            return
        yield frame.f_locals.get("self")
        frame = frame.f_back


def calling_loader(dataset: Any, start: int = 1) -> Any | None:
    """The torch DataLoader of ``dataset`` among the callers of the caller (``start``: more
    frames up), None when there is none (or torch is not imported)."""
    data = sys.modules.get("torch.utils.data")
    if data is None:
        return None
    for obj in _callers(start + 1):
        if isinstance(obj, data.DataLoader) and obj.dataset is dataset:
            return obj
    return None


def collated(start: int = 1) -> bool:
    """Whether the caller of the caller (``start``: more frames up) is iterated by a
    DataLoader fetcher that batches its items with a collator."""
    fetch = sys.modules.get("torch.utils.data._utils.fetch")
    if fetch is None:
        return False
    for obj in _callers(start + 1):
        if isinstance(obj, fetch._BaseDatasetFetcher):
            return bool(obj.auto_collation)
    return False


def check_loader_batch(dataset: Any, loader: Any) -> bool:
    """Whether ``dataset`` (batched) serves rows to ``loader``, which batches them:
    its ``batch_size`` must be the dataset's, as it must for a dataset of samples.

    Raises:
        ConfigError: another batch size, or Arrow batches, which no collator stacks.
    """
    return _check_batch(dataset, getattr(loader, "batch_size", None))


def _check_batch(dataset: Any, b: int | None) -> bool:
    """:func:`check_loader_batch` for a DataLoader of ``batch_size`` ``b``."""
    if dataset.batch_format is None and b not in (None, dataset.batch_size):
        raise ConfigError(
            f"a StreamingDataset of samples is planned in batches of its batch_size (its "
            f"length, its state's consumed_batches): give it batch_size={b}, as its "
            f"DataLoader's, or the DataLoader batch_size={dataset.batch_size}"
        )
    if dataset.batch_format is None or b is None:
        return False
    if b != dataset.batch_size or dataset.batch_format == "arrow":
        raise ConfigError(
            f"a StreamingDataset with batch_size={dataset.batch_size} and "
            f"batch_format={dataset.batch_format!r} makes its own batches: give its DataLoader "
            f"batch_size=None (or, to batch its rows with a collator, as HF Trainer does, "
            f"batch_size={dataset.batch_size} and batch_format 'numpy' or 'torch'), not {b}"
        )
    return True


def rows_of(dataset: Any, batches: Iterator[Any]) -> Iterator[dict[str, Any]]:
    """Each batch's rows, in order, for a collator to stack into the same batches again."""
    if dataset.batch_format == "arrow":
        raise ConfigError(
            "a StreamingDataset of Arrow batches in a DataLoader that batches: give the "
            "DataLoader batch_size=None"
        )
    for batch in batches:
        n = len(next(iter(batch.values()))) if batch else 0
        for i in range(n):
            yield {k: v[i] for k, v in batch.items()}


def loader_length(dataset: Any) -> int:
    """``len(dataset)`` (its ``__len__`` calls this) without an accelerate wrapper: its
    batches per rank for the workers of the DataLoader asking, or its samples per rank
    (per-sample mode, or rows served to a DataLoader that batches them)."""
    dataset.ranks.check_now()
    loader = calling_loader(dataset, 2)
    p = dataset.plan(max(1, loader.num_workers) if loader is not None else None)
    rows = loader is not None and check_loader_batch(dataset, loader)
    return int(p.batches_per_rank if dataset.batch_format and not rows else p.samples_per_rank)


def loader_items(dataset: Any, items: Iterator[Any]) -> Iterator[Any]:
    """What the dataset's ``__iter__`` (which calls this) yields of its ``items``: their
    rows when it is batched and its DataLoader batches them (the DataLoader's batch size
    checked where the DataLoader is among the callers: in the training process, as are
    detected ranks: see :meth:`~shardwise.loader.placement.Ranks.check_now`)."""
    dataset.ranks.check_now()
    loader = calling_loader(dataset, 2)
    if loader is not None:
        check_loader_batch(dataset, loader)
    if not collated(2):
        return items
    return _fetched(dataset, rows_of(dataset, items) if dataset.batch_format else items)


def _fetched(dataset: Any, items: Iterator[Any]) -> Iterator[Any]:
    """``items``, once the fetcher asking for the first of them (in a DataLoader worker
    too, where no DataLoader is among the callers) takes as many per batch as the
    dataset's ``batch_size``: batches of another size would put other samples in each
    step than the plan's, and a state's ``consumed_batches`` would count other batches
    (:func:`check_loader_batch`)."""
    _check_batch(dataset, fetched_batch_size(1))
    yield from items


def fetched_batch_size(start: int = 1) -> int | None:
    """Items per batch of the DataLoader fetcher that called ``next`` on the caller (a
    generator; ``start``: more frames up), None when none did or it does not batch."""
    fetch = sys.modules.get("torch.utils.data._utils.fetch")
    if fetch is None:
        return None
    frame: FrameType | None = sys._getframe(start + 1)
    for _ in range(_DEPTH):
        if frame is None:
            return None
        fetcher = frame.f_locals.get("self")
        if isinstance(fetcher, fetch._BaseDatasetFetcher):
            index = frame.f_locals.get("possibly_batched_index")
            return len(index) if fetcher.auto_collation and index else None
        frame = frame.f_back
    return None
