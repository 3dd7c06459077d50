"""Processes that use one node cache directory: for the cache tests (spawned children).

Each function is top-level so ``multiprocessing`` (spawn) can run it in a child.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.entry import Extent

SIZE = 50_000


def payload(i: int, n: int = SIZE) -> bytes:
    """The deterministic bytes of object ``i``."""
    return (f"object {i} ".encode() * (n // 8 + 2))[:n]


def extent(i: int, n: int = SIZE) -> Extent:
    return Extent(f"s3://bucket/obj{i}", 0, n, "etag-1")


def slow_fetch(i: int, n: int = SIZE, delay: float = 0.02) -> Iterator[bytes]:
    data = payload(i, n)
    time.sleep(delay)
    yield data[: n // 2]
    time.sleep(delay)
    yield data[n // 2 :]


def lease_all(root: str, budget: int, ids: list[int], result: str) -> None:
    """Lease every object once, checking its bytes; write the stats to ``result``."""
    cache = NodeCache(root, budget)
    for i in ids:
        with cache.lease(extent(i), lambda i=i: slow_fetch(i)) as data:
            assert data == payload(i), f"wrong bytes for {i}"
    with open(result, "w") as f:
        f.write(f"{cache.stats.downloads} {cache.stats.hits}")


def hold_lease(root: str, budget: int, i: int, ready: str) -> None:
    """Lease object ``i`` and hold it until killed."""
    cache = NodeCache(root, budget)
    with cache.lease(extent(i), lambda: slow_fetch(i, delay=0)):
        open(ready, "w").close()
        time.sleep(3600)


def stuck_download(root: str, budget: int, i: int, ready: str) -> None:
    """Start downloading object ``i``, write half of it, and hang until killed."""
    cache = NodeCache(root, budget)

    def fetch() -> Iterator[bytes]:
        yield payload(i)[: SIZE // 2]
        open(ready, "w").close()
        time.sleep(3600)
        yield b""

    with cache.lease(extent(i), fetch):
        pass


def wait_for(path: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(path)
        time.sleep(0.01)


def disk_bytes(root: str) -> int:
    """Bytes of every file under the cache's entries/ and tmp/ (what the budget bounds)."""
    total = 0
    for sub in ("entries", "tmp"):
        d = os.path.join(root, sub)
        for name in os.listdir(d):
            try:
                total += os.stat(os.path.join(d, name)).st_size
            except FileNotFoundError:
                pass
    return total
