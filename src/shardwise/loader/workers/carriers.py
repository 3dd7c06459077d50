"""Every batch format's strings and binary values through the worker's shared-memory ring.

The DataLoader worker pickles each batch down one pipe to the training process, which
unpickles it: for a batch of images of about 100 KB that is the payload copied four times
(pickled, into the kernel in 64 KiB steps, out of it, unpickled). Here each format's
variable-width columns go into the worker's ring instead (one copy in; one out, in the
training process, into memory of its own: see :mod:`shardwise.loader.workers.carry`), and
the consumer gets the batch type it got before, with equal values:

- ``"numpy"`` batches: :class:`~shardwise.loader.workers.transport.RingBatch`, as before;
  binary columns and columns with nulls now go through the ring too.
- ``"torch"`` batches: a ``RingBatch`` too; their strings and binary values (numpy object
  arrays) go through the ring, tensors through torch's own shared memory as before.
- ``"arrow"`` batches: a ``pyarrow.RecordBatch`` whose string and binary columns hold at
  least :data:`MIN_BYTES` of values crosses as one region; its other columns are pickled
  as Arrow pickles them. It arrives as a record batch of the same schema whose carried
  columns own their buffers (offsets from 0).
- per-sample dicts: each sample is a :class:`SampleDict` (a ``dict``) in the worker, which
  a DataLoader's default collation keeps; a ``bytes`` or ``str`` value, or a collated list
  of them, of at least :data:`MIN_BYTES` goes through the ring. It arrives as a ``dict``.

Only ``multiprocessing``'s pickling in a DataLoader worker (``ForkingPickler``) does this,
after :func:`enable`; anything the ring cannot take (full for too long, too large) goes
by value, as everything did before.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from shardwise.loader.batches.gather import fieldless_batch
from shardwise.loader.workers import transport
from shardwise.loader.workers.carry import (
    Layout,
    Part,
    arrow_layout,
    encode_strings,
    objects_layout,
)
from shardwise.loader.workers.receive import rebuild_batch

__all__ = ["MIN_BYTES", "SampleDict", "enable", "travel_for"]

MIN_BYTES = 64 * 2**10  # values a record batch or a sample's value needs to use the ring


class SampleDict(dict[str, Any]):
    """A per-sample dict made in a DataLoader worker: its large ``bytes``/``str`` values
    (or lists of them, once collated) cross to the training process through the ring.
    It arrives as a plain ``dict``."""


def _reduce_record_batch(rb: pa.RecordBatch) -> tuple[Any, tuple[Any, ...]]:
    """A record batch's string and binary columns into one ring region, the others by
    value; the whole batch by value when they hold less than :data:`MIN_BYTES`, or
    without the ring. A batch of no columns goes as its row count (pickled, pyarrow's
    loses its rows)."""
    if not rb.num_columns:
        return fieldless_batch, (rb.num_rows, rb.schema)
    if not transport.active():
        return rb.__reduce__()
    specs: list[tuple[Any, ...]] = []
    parts: list[Part] = []
    carried = 0
    for i, col in enumerate(rb.columns):
        layout = arrow_layout(col, "arrow")
        if layout is None:
            specs.append((str(i), "v", col))
            continue
        specs.append((str(i), *layout[0]))
        parts.extend(layout[1])
        carried += layout[0][-1]
    reduced = transport.put_region(specs, parts) if carried >= MIN_BYTES else None
    if reduced is None:
        return rb.__reduce__()
    return _rebuild_record_batch, (rb.schema, reduced[1])


def _rebuild_record_batch(schema: pa.Schema, region: tuple[Any, ...]) -> pa.RecordBatch:
    columns = rebuild_batch(*region)
    return pa.RecordBatch.from_arrays([columns[str(i)] for i in range(len(schema))], schema=schema)


def _value_layout(value: Any) -> Layout | None:
    """A sample's value (or collated list of values) of at least :data:`MIN_BYTES`."""
    if type(value) in (bytes, str) and len(value) >= MIN_BYTES:
        return objects_layout([value], "value", encode_strings)
    texts = type(value) is list and value and type(value[0]) in (bytes, str)
    if texts and sum(len(v) for v in value if type(v) in (bytes, str)) >= MIN_BYTES:
        return objects_layout(value, "list", encode_strings)
    return None


def _reduce_sample(sample: SampleDict) -> tuple[Any, tuple[Any, ...]]:
    """A sample's large values into one ring region, everything else by value."""
    specs: list[tuple[Any, ...]] = []
    parts: list[Part] = []
    for name, value in sample.items():
        layout = _value_layout(value)
        specs.append((name, "v", value) if layout is None else (name, *layout[0]))
        parts.extend(layout[1] if layout is not None else [])
    reduced = transport.put_region(specs, parts) if parts else None
    return reduced or (dict, (dict(sample),))


def _sample(row: dict[str, Any], strings: dict[str, pa.Array]) -> SampleDict:
    return SampleDict(row)


def _torch_batch(batch: dict[str, Any], strings: dict[str, pa.Array]) -> transport.RingBatch:
    return transport.RingBatch(batch)


def travel_for(batch_format: str | None) -> Callable[[dict[str, Any], Any], Any] | None:
    """How this process's items travel, if it is a DataLoader worker that sends them
    through its ring (see :func:`enable`): numpy and torch batches as ``RingBatch``,
    per-sample dicts as :class:`SampleDict`; None otherwise (and for Arrow batches, whose
    type carries them)."""
    if not transport.active():
        return None
    return {"numpy": transport.ring_batch, "torch": _torch_batch, None: _sample}.get(batch_format)


def enable(ring_bytes: int = 0) -> None:
    """Send every batch format's strings and binary values through this DataLoader
    worker's ring (of ``ring_bytes``, at least ``RING_BYTES``) when ``multiprocessing``
    pickles them (see :func:`shardwise.loader.workers.transport.enable`, which decides
    whether it can); record batches of no columns keep their rows either way."""
    from multiprocessing.reduction import ForkingPickler

    transport.enable(ring_bytes)
    ForkingPickler.register(pa.RecordBatch, _reduce_record_batch)  # its rows, ring or not
    if transport.active():
        ForkingPickler.register(SampleDict, _reduce_sample)
