"""The training process's side of the shared-memory transport (see
:mod:`shardwise.loader.workers.transport`): a worker's ring mapped once, and each batch's
columns copied out of it into arrays (or Arrow arrays, or Python objects) the training
process owns.

The copies out are new memory for every batch: a batch of 64 images of 100 KB is 64
``bytes`` objects from glibc's heap, whose top glibc gave back to the kernel once the
batch was freed, so every page of the next batch was faulted in and zeroed again (4.6 ms
a batch for 6.4 MB here; 0.4 ms with the memory kept). So when a worker's ring is first
mapped, the training process keeps up to 64 MiB of freed heap memory
(:func:`shardwise.parallel._malloc.keep_freed_memory`, glibc only), unless
``SHARDWISE_KEEP_FREED=0``.
"""

from __future__ import annotations

import mmap
import os
from typing import Any

import numpy as np

from shardwise.loader.batches.numpy_column import NumpyColumn
from shardwise.loader.workers.carry import rebuild_text
from shardwise.loader.workers.ring import HEADER, aligned
from shardwise.parallel._malloc import keep_freed_memory

__all__ = ["rebuild_batch", "rebuild_column"]

_maps: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray, int]] = {}


def _attach(pid: int, fd: int, token: int) -> tuple[np.ndarray, np.ndarray, int]:
    key = (pid, fd, token)
    got = _maps.get(key)
    if got is None:
        if os.environ.get("SHARDWISE_KEEP_FREED", "1") != "0":
            keep_freed_memory()
        for old in [k for k in _maps if not _alive(k[0])]:  # rings of finished workers
            del _maps[old]
        handle = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDWR)
        try:
            size = os.fstat(handle).st_size
            m = mmap.mmap(handle, size)
        finally:
            os.close(handle)
        header = np.frombuffer(m, dtype=np.int64, count=HEADER // 8)
        if int(header[1]) != token:
            raise RuntimeError(f"shared-memory ring of DataLoader worker {pid} was replaced")
        got = _maps[key] = (header, np.frombuffer(m, dtype=np.uint8, offset=HEADER), int(header[2]))
    return got


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def rebuild_column(
    pid: int, fd: int, token: int, start: int, nbytes: int, specs: list[tuple[Any, ...]]
) -> NumpyColumn:
    column: NumpyColumn = rebuild_batch(pid, fd, token, start, nbytes, specs)[""]
    return column


def rebuild_batch(
    pid: int, fd: int, token: int, start: int, nbytes: int, specs: list[tuple[Any, ...]]
) -> dict[str, Any]:
    header, data, size = _attach(pid, fd, token)
    region = data[start % size : start % size + nbytes]
    out: dict[str, Any] = {}
    off = 0
    for spec in specs:
        name, kind = spec[0], spec[1]
        if kind in ("o", "v"):
            out[name] = spec[2].view(NumpyColumn) if kind == "o" else spec[2]
        elif kind == "a":
            arr = np.empty(spec[3], dtype=np.dtype(spec[2]))
            n = arr.nbytes
            arr.reshape(-1).view(np.uint8)[:] = region[off : off + n]
            off += aligned(n)
            out[name] = arr.view(NumpyColumn)
        else:  # "x": strings or binary values (see shardwise.loader.workers.carry)
            out[name], off = rebuild_text(region, off, spec[2:])
    header[0] = start + nbytes  # this space may be written again
    return out
