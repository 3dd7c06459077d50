"""What streaming sets up in a DataLoader worker process: Arrow's allocator, and the
shared-memory transport of batches.

In a worker, pyarrow's default allocator (mimalloc) returned the memory of every
decoded unit to the system and faulted it back in (zeroing huge pages) for the next
one, which cost about a third of a worker's time on the 2-core benchmark machine; so a
worker makes
jemalloc Arrow's default allocator in its process, unless the environment variable
``ARROW_DEFAULT_MEMORY_POOL`` is set (which keeps pyarrow's choice). The training
process is left alone: its in-process path lets each unit go as soon as its rows are
copied (see :mod:`shardwise.loader.batches.arrival`), and there the default allocator, which
keeps freed memory for the next unit, is the faster one.
"""

from __future__ import annotations

import os

from shardwise.loader.workers.carriers import enable

__all__ = ["prefer_jemalloc", "setup_worker"]


def prefer_jemalloc() -> None:
    """Make jemalloc Arrow's default allocator in this process, where pyarrow has it and
    ``ARROW_DEFAULT_MEMORY_POOL`` does not choose otherwise."""
    if "ARROW_DEFAULT_MEMORY_POOL" in os.environ:
        return
    import pyarrow as pa

    try:
        pa.set_memory_pool(pa.jemalloc_memory_pool())
    except (NotImplementedError, pa.ArrowNotImplementedError):
        pass


def setup_worker(batch_format: str | None) -> None:
    """Prepare a DataLoader worker process for streaming: jemalloc for Arrow (see
    :func:`prefer_jemalloc`) and columns sent through shared memory: numpy batches', and
    every format's strings and binary values
    (:func:`shardwise.loader.workers.carriers.enable`)."""
    prefer_jemalloc()
    enable()
