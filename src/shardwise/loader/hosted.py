"""Serve a dataset exactly to an HF Accelerate wrapper that re-shards it (see
:mod:`shardwise.loader.wrappers`, which recognises the wrapper and gives its
:class:`~shardwise.loader.wrappers.Hosting`).

- Dispatch (``DataLoaderDispatcher``, accelerate's default for an iterable dataset, and so
  HF ``Trainer``'s): rank 0 alone draws from its DataLoader and hands every rank its slice
  of each step. So rank 0 serves the whole epoch: its DataLoader worker ``w`` yields the
  plan's pieces ``(r, w)`` for every rank ``r``, one after the other (one piece in memory
  at a time, as without the wrapper). Every batch of the plan is delivered once, each step
  has a batch for every rank, and the ranks take the same number of steps. The other ranks
  yield nothing (their DataLoader is created, never drawn from). The dispatcher
  concatenates and broadcasts tensors only: ``"numpy"`` batches are served as ``"torch"``
  ones, and a column that is not a tensor (strings) is an error at the first batch.
- Shard (``IterableDatasetShard``, ``dispatch_batches=False``): every rank keeps its slice
  of each group of ``per_process * processes`` items. Rank ``r`` serves its own piece of
  the plan at the positions it keeps and ``None`` at the others, which the shard drops
  unseen: nothing is read twice, and a piece is whole groups, so the shard never pads.
- A batched dataset in a DataLoader that batches with a collator (HF ``Trainer``'s, with
  ``per_device_train_batch_size`` equal to the dataset's ``batch_size``) serves the rows of
  its batches, which the collator makes into the same batches again.
- Resume (accelerate's ``skip_first_batches``, which ``Trainer(resume_from_checkpoint=)``
  uses): the wrapper still draws and discards the first batches; each worker works out
  which of its items those are and serves placeholders for them (a tiny tensor batch, a
  sample of zeros, ``None``), continuing its piece after them without reading them. After
  a resume from a saved position on another topology (:mod:`.trainer_hooks`) the skipped
  steps stand for no data of the new plan: the placeholders come before its pieces.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pyarrow as pa

from shardwise.errors import ConfigError
from shardwise.loader.batches.samples import rows
from shardwise.loader.placement import Placement
from shardwise.loader.shard import shard_items
from shardwise.loader.wrappers import Hosting

__all__ = ["firsts", "hosted_items"]


def hosted_items(ds: Any, hosting: Hosting, placement: Placement) -> Iterator[Any]:
    """What ``ds`` yields to ``hosting``'s wrapper in this (process, worker)."""
    if hosting.dispatch:
        if hosting.process_index != 0:  # only rank 0's DataLoader is drawn from; this
            ds.state.begin_pass(hosting.process_index, placement.worker_id)  # pass counts
            return iter(())
        return _dispatched(ds, hosting, placement)
    return _sharded(ds, hosting, placement)


def firsts(items: int, worker: int, workers: int) -> int:
    """How many of a DataLoader's first ``items`` items its worker ``worker`` made (the
    DataLoader takes them from its workers in turn)."""
    return max(0, -(-(items - worker) // workers))


def _dispatched(ds: Any, h: Hosting, p: Placement) -> Iterator[Any]:
    """Rank 0's worker ``p.worker_id``: the pieces of every rank, in turn."""
    per_item = h.loader_batch * (h.processes if h.split else 1)  # samples per DataLoader item
    skipped = h.skip_batches * (1 if h.split else h.processes)  # DataLoader items
    skip = firsts(skipped, p.worker_id, p.num_workers) * per_item  # samples of this worker
    fmt = "torch" if ds.batch_format == "numpy" else ds.batch_format  # what it broadcasts
    placeholder = _sample_placeholder(ds) if h.samples else _tensor_placeholder()
    first = True
    for r in range(h.processes):  # the epoch of every rank's piece, now: another pass over
        ds.state.begin_pass(r, p.worker_id)  # the dataset meanwhile (an evaluation) moves none
    if _prepends(ds, h):
        yield from itertools.repeat(placeholder, skip // _unit(ds, h))
        skip = 0
    for r in range(h.processes):
        n = ds.plan(p.num_workers, h.processes).worker(r, p.worker_id).num_samples
        mine, skip = min(skip, n), max(0, skip - n)
        yield from itertools.repeat(placeholder, mine // _unit(ds, h))
        for item in _piece(ds, h, p, r, mine, fmt, begun=True):
            if first and not h.samples:
                _check_tensors(item, ds)
            first = False
            yield item


def _sharded(ds: Any, h: Hosting, p: Placement) -> Iterator[Any]:
    """Rank ``h.process_index``'s worker ``p.worker_id``: its own piece at the positions the
    shard keeps, ``None`` at the others."""
    per, r = h.per_process, h.process_index
    skip_items = firsts(h.skip_batches, p.worker_id, p.num_workers) * per
    placeholder = _sample_placeholder(ds) if h.samples else None
    items = itertools.chain(
        itertools.repeat(placeholder, skip_items),
        _piece(ds, h, p, r, 0 if _prepends(ds, h) else skip_items * _unit(ds, h), ds.batch_format),
    )
    before, after = [None] * (r * per), [None] * ((h.processes - 1 - r) * per)
    while group := list(itertools.islice(items, per)):
        yield from before
        yield from group
        yield from after


def _prepends(ds: Any, h: Hosting) -> bool:
    """Whether the steps the wrapper skips are placeholders put before the epoch's rest: a
    resume from a saved position on another topology (:mod:`.wrapper_position`), not the
    trained steps themselves."""
    return h.skip_batches > 0 and ds.state.prepended == (ds.state.epoch, h.skip_batches)


def _unit(ds: Any, h: Hosting) -> int:
    """Samples per item the dataset yields."""
    return 1 if h.samples else int(ds.batch_size)


def _piece(
    ds: Any, h: Hosting, p: Placement, rank: int, skip: int, fmt: Any, begun: bool = False
) -> Iterator[Any]:
    """The piece of ``rank`` and this worker, after ``skip`` samples (its pass ``begun``
    already, or not); the rows of its batches when the dataset serves samples of a
    batched format."""
    reading = replace(ds.reading, memory=ds._memory, batch_format=fmt)
    where = (rank, h.processes, p.worker_id, p.num_workers)
    items = shard_items(ds.state, ds.planner, reading, *where, skip, begun, hosted=True)
    if not h.samples or ds.batch_format is None:
        return items
    return ({k: v[i] for k, v in batch.items()} for batch in items for i in range(ds.batch_size))


def _check_tensors(batch: Any, ds: Any) -> None:
    import torch

    other = [k for k, v in batch.items() if not isinstance(v, torch.Tensor)]
    if other:
        raise ConfigError(
            f"accelerate's DataLoaderDispatcher (dispatch_batches, its default for an iterable "
            f"dataset) broadcasts tensors only, and columns {other} of this "
            f"batch_format={ds.batch_format!r} dataset are not: read numeric columns only "
            "(columns=), or prepare the DataLoader with dispatch_batches=False, or use "
            "shardwise.integrations.hf.ShardwiseLoader / ShardwiseTrainer"
        )


def _tensor_placeholder() -> dict[str, Any]:
    """A batch the dispatcher can concatenate and broadcast, then discards."""
    import torch

    return {"shardwise_skipped": torch.zeros(1, dtype=torch.uint8)}


def _sample_placeholder(ds: Any) -> dict[str, Any]:
    """A sample of the dataset's columns holding zeros (empty strings and lists), for a
    collator to batch like the real ones before the wrapper discards the batch."""
    schema = ds.reading.schema()
    arrays = [_zeros(f.type) for f in schema]
    return next(rows(pa.RecordBatch.from_arrays(arrays, schema=schema)))


def _zeros(t: pa.DataType) -> pa.Array:
    """One value of type ``t`` that is zero or empty (null where there is none)."""
    try:
        return pa.array([_zero(t)], type=t)
    except (pa.ArrowException, TypeError, ValueError):
        return pa.nulls(1, type=t)


def _zero(t: pa.DataType) -> Any:
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return ""
    if pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return b""
    if pa.types.is_fixed_size_list(t):
        return [_zero(t.value_type)] * t.list_size
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return []
    if pa.types.is_struct(t):
        return {t.field(i).name: _zero(t.field(i).type) for i in range(t.num_fields)}
    if pa.types.is_boolean(t):
        return False
    return 0
