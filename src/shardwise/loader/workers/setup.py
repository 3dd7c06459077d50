"""What streaming sets up in a DataLoader worker process: Arrow's allocator, and the
shared-memory transport of batches, in a ring sized for the dataset's batches (a batch
that needs more than half of it goes by value).

In a worker, pyarrow's default allocator (mimalloc) returned the memory of every
decoded unit to the system and faulted it back in (zeroing huge pages) for the next
one, which cost about a third of a worker's time on the 2-core benchmark machine; so a
worker makes jemalloc Arrow's default allocator in its process, unless the environment
variable ``ARROW_DEFAULT_MEMORY_POOL`` is set (which keeps pyarrow's choice). The
in-process path does the same in the training process
(:func:`shardwise.loader.batches.memory.prefer_jemalloc`).

A worker also keeps memory freed by the C library's ``malloc`` for its next batches
(:func:`shardwise.parallel._malloc.keep_freed_memory`): a batch's Python ``bytes`` of about
100 KB each come from the heap, and glibc gave the heap's top back to the kernel after
every batch and faulted it in again for the next (see :mod:`shardwise.loader.workers.receive`
for the same in the training process).

Last, a worker moves every object it has at that point (what it inherited from the training
process or imported: torch, botocore, the dataset) out of reach of Python's cyclic garbage
collector (:func:`freeze_inherited`, ``gc.freeze``). Otherwise each full collection walks
all of them and, in a forked worker, writes to the pages holding them, so the kernel copies
those pages (copy-on-write) into fresh memory. A worker's downloads allocate enough to start
full collections: a cold epoch of the S3 benchmark's tar shards ran 17-20% faster with the
freeze (its figures are in ``benchmarks/NOTES.md``). ``SHARDWISE_GC_FREEZE=0`` leaves the
collector alone.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Sequence

from shardwise.formats import Unit
from shardwise.loader.batches.memory import prefer_jemalloc
from shardwise.loader.workers.carriers import enable
from shardwise.parallel._malloc import keep_freed_memory

__all__ = [
    "MAX_RING_BYTES",
    "RING_BATCHES",
    "freeze_inherited",
    "prefer_jemalloc",
    "ring_bytes_for",
    "setup_worker",
]

RING_BATCHES = 4  # batches a worker's ring holds (a DataLoader asks 2 ahead by default)
MAX_RING_BYTES = 256 * 2**20  # beyond this a batch's values go by value
_frozen_in: int | None = None  # the process that froze (a forked child freezes again)


def freeze_inherited() -> bool:
    """Put every object of this process out of the cyclic collector's reach, once per
    process (see the module docstring), unless ``SHARDWISE_GC_FREEZE=0``. Whether it did
    now."""
    global _frozen_in
    if os.environ.get("SHARDWISE_GC_FREEZE", "1") == "0" or _frozen_in == os.getpid():
        return False
    _frozen_in = os.getpid()
    gc.freeze()
    return True


def ring_bytes_for(units: Sequence[Unit], batch_size: int) -> int:
    """The size of a worker's ring for batches of ``batch_size`` rows of ``units``: room
    for :data:`RING_BATCHES` batches of their stored bytes per row, at most
    :data:`MAX_RING_BYTES` (the ring's own minimum applies below that)."""
    rows = sum(u.num_samples for u in units)
    per_batch = sum(u.num_bytes for u in units) * batch_size // max(rows, 1)
    return min(MAX_RING_BYTES, RING_BATCHES * per_batch)


def setup_worker(batch_format: str | None, ring_bytes: int = 0) -> None:
    """Prepare a DataLoader worker process for streaming: jemalloc for Arrow (see
    :func:`prefer_jemalloc`), freed heap memory kept, and columns sent through shared
    memory, in a ring of
    ``ring_bytes`` (see :func:`ring_bytes_for`): numpy batches', and every format's
    strings and binary values (:func:`shardwise.loader.workers.carriers.enable`); then
    what the process holds is frozen out of the cyclic collector (:func:`freeze_inherited`)."""
    prefer_jemalloc()
    keep_freed_memory()
    enable(ring_bytes)
    freeze_inherited()
