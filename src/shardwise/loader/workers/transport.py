"""Moving ``batch_format="numpy"`` batches from DataLoader workers through shared memory.

A DataLoader worker sends each batch to the training process down one pipe shared by
all workers: the batch is pickled into bytes, copied into the kernel in 64 KiB steps
(each one a context switch on a busy machine), copied out and unpickled. For batches of
ordinary size that costs more than reading and decoding the rows. Tensors avoid the pipe
by going through shared memory, but one segment and one file-descriptor handoff per
tensor costs even more.

Here each worker writes the bytes of its :class:`NumpyColumn` columns into one ring of
shared memory of its own (a ``memfd``, created on first use) and sends only a small
reference down the pipe; the training process maps the ring once per worker, copies the
bytes out into arrays it owns, and records how far it has read, so the worker reuses the
space. The loader's batches are :class:`RingBatch` dicts, whose columns all go into one
region (one reservation, one reference and one rebuild per batch). String and binary
columns (of numpy batches, and the object arrays of torch batches) travel as Arrow
offsets and bytes and become Python objects on arrival
(:mod:`shardwise.loader.workers.carry`). Inside such a worker
the loader's arrays are read-only (they are copied into the ring anyway, and arrive
writable), and a string column made by :func:`string_column` carries the Arrow array it
came from, whose buffers are sent as they are instead of encoding the Python strings
again. This is only used by :class:`multiprocessing` pickling inside a DataLoader worker
(``ForkingPickler``); a batch pickled in any other way is pickled by value.

The worker never waits long: a column larger than half the ring, a ring that stays full
for a second (the trainer is slow to consume), or anything that cannot go through
the ring is sent by value instead, so the transport only ever changes the speed.
Linux only (``memfd``); elsewhere, or with ``SHARDWISE_SHM=0``, batches go by value.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pyarrow as pa

from shardwise.loader.batches.numpy_column import NumpyColumn
from shardwise.loader.workers.carry import Layout, Part, arrow_layout, objects_layout
from shardwise.loader.workers.receive import rebuild_batch, rebuild_column
from shardwise.loader.workers.ring import Ring

__all__ = ["RingBatch", "active", "enable", "put_region", "ring_batch", "string_column"]

RING_BYTES = 32 * 2**20  # per worker


class RingBatch(dict[str, Any]):
    """A batch (column name -> :class:`NumpyColumn`) that crosses to the training process
    as one region of the ring: one reservation, one reference and one rebuild per batch
    instead of one per column. It arrives as a plain ``dict``."""


_ring: Ring | None = None
_active = False
_wanted = 0  # the ring's size asked for by enable() (at least RING_BYTES)


def _worker_ring() -> Ring:
    global _ring
    if _ring is None or _ring.pid != os.getpid():  # a forked child makes its own
        _ring = Ring(max(RING_BYTES, _wanted))
    return _ring


def _by_value(arr: np.ndarray) -> NumpyColumn:
    return arr.view(NumpyColumn)


def _layout(col: np.ndarray, form: str = "numpy") -> Layout | None:
    """How a column goes into a ring region: its spec (see :func:`rebuild_batch`) and the
    arrays to write, or None if it must go by value."""
    if not col.dtype.hasobject:
        arr = np.ascontiguousarray(col.view(np.ndarray))
        return ("a", arr.dtype.str, arr.shape), [arr]
    if col.ndim != 1:
        return None
    # a column made by string_column and still read-only holds exactly its Arrow values:
    # their buffers go to the ring without re-encoding the objects
    made_from = None if col.flags.writeable else getattr(col, "_sw_arrow", None)
    got = arrow_layout(made_from, form) if made_from is not None else None
    return got or objects_layout(col.view(np.ndarray), form, _reduce_objects)


def put_region(
    layouts: list[tuple[Any, ...]], parts: list[Part]
) -> tuple[Any, tuple[Any, ...]] | None:
    """Write ``parts`` into this worker's ring; the reduction that rebuilds them, or None."""
    try:
        ring = _worker_ring()
        placed = ring.put(parts)
    except OSError:  # no memfd, no memory for the ring
        return None
    if placed is None:
        return None
    return rebuild_batch, (ring.pid, ring.fd, ring.token, *placed, layouts)


def _reduce(col: NumpyColumn) -> tuple[Any, tuple[Any, ...]]:
    layout = _layout(col)
    reduced = put_region([("", *layout[0])], layout[1]) if layout is not None else None
    if reduced is None:
        return _by_value, (np.ascontiguousarray(col.view(np.ndarray)),)
    return rebuild_column, reduced[1]


def _reduce_objects(arr: np.ndarray) -> Any:
    """A 1-D array of Python strings as an Arrow large_string array, or None."""
    import pyarrow as pa

    try:  # inferred, not given: with a string type given, Arrow also takes UTF-8 bytes
        got = pa.array(arr, from_pandas=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return None  # mixed objects
    return got if isinstance(got, pa.Array) else None  # str only (bytes stay bytes)


def _column(name: str, col: Any) -> tuple[tuple[Any, ...], list[Part]]:
    """A column's spec and the parts it writes into the batch's region (none by value)."""
    # (name, "a", dtype, shape): array bytes; (name, "x", ...): strings or binary values
    # (see carry.py); (name, "o", array): a column by value; (name, "v", value): as it is
    layout = None
    if isinstance(col, NumpyColumn):
        layout = _layout(col)
    elif type(col) is np.ndarray and col.dtype == object:  # a torch batch's strings, binary
        layout = _layout(col, "objects")
    if layout is not None:
        return (name, *layout[0]), layout[1]
    return _by_value_spec(name, col), []


def _by_value_spec(name: str, col: Any) -> tuple[Any, ...]:
    return (name, "o", np.asarray(col)) if isinstance(col, NumpyColumn) else (name, "v", col)


def _reduce_batch(batch: RingBatch) -> tuple[Any, tuple[Any, ...]]:
    """All columns of a batch into one ring region; anything else in it goes by value."""
    specs: list[tuple[Any, ...]] = []
    parts: list[Part] = []
    for name, col in batch.items():
        spec, col_parts = _column(name, col)
        specs.append(spec)
        parts.extend(col_parts)
    reduced = put_region(specs, parts) if parts else None
    if reduced is None:
        return _batch_by_value, ([_by_value_spec(name, col) for name, col in batch.items()],)
    return reduced


def _batch_by_value(specs: list[tuple[str, str, Any]]) -> dict[str, Any]:
    return {name: value.view(NumpyColumn) if kind == "o" else value for name, kind, value in specs}


def string_column(values: np.ndarray, strings: Any) -> NumpyColumn:
    """``values`` (Python strings) as a read-only column that remembers ``strings``, the
    Arrow array it was made from, so the transport can send Arrow's buffers as they are."""
    col = values.view(NumpyColumn)
    col.flags.writeable = False
    col._sw_arrow = strings
    return col


def active() -> bool:
    """Whether this process sends numpy batches through its ring (set up by setup_worker)."""
    return _active


def ring_batch(batch: dict[str, Any], strings: dict[str, pa.Array]) -> RingBatch:
    """A numpy batch made to travel through the ring as one region; its string columns
    remember the Arrow arrays ``strings`` they were made from (see :func:`string_column`)."""
    for name, values in strings.items():
        batch[name] = string_column(batch[name], values)
    return RingBatch(batch)


def enable(ring_bytes: int = 0) -> None:
    """Send :class:`NumpyColumn` columns and :class:`RingBatch` batches through shared
    memory when ``multiprocessing`` pickles them in this process (a DataLoader worker), in
    a ring of ``ring_bytes`` (at least :data:`RING_BYTES`); not with ``SHARDWISE_SHM=0`` or
    without ``memfd`` (they then go by value)."""
    global _wanted
    if os.environ.get("SHARDWISE_SHM", "1") == "0" or not hasattr(os, "memfd_create"):
        return
    _wanted = ring_bytes
    from multiprocessing.reduction import ForkingPickler

    global _active
    ForkingPickler.register(NumpyColumn, _reduce)
    ForkingPickler.register(RingBatch, _reduce_batch)
    _active = True
