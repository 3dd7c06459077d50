"""What streaming sets up in the process it runs in: Arrow's allocator, and in a
DataLoader worker the shared-memory transport of numpy batches.

Both loader paths decode units and keep them (a window of them) while their rows are
gathered. With pyarrow's default allocator (mimalloc) the memory of decoded units is
given back to the system and faulted in again, on huge pages where the allocator asks
for them, and on the 2-core benchmark machine that cost 2-4 CPU seconds of kernel time
per epoch of 1 GB, about as much as decoding; jemalloc cost 1.0-1.8. So both paths
make jemalloc Arrow's default allocator in their process (a DataLoader worker, or the
training process when it iterates a batched dataset itself), unless the environment
variable ``ARROW_DEFAULT_MEMORY_POOL`` is set, which keeps pyarrow's own choice (set
it, e.g. to ``mimalloc``, to opt out). pyarrow offers no way to give its Parquet reader
a pool of its own, hence the process-wide setting; buffers already allocated stay
valid, each freed by the pool that made it.
"""

from __future__ import annotations

import os

from shardwise.loader.transport import enable

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
    :func:`prefer_jemalloc`) and, for numpy batches, columns sent through shared memory
    (:func:`shardwise.loader.transport.enable`)."""
    prefer_jemalloc()
    if batch_format == "numpy":
        enable()
