"""The fork gate (storage/forkgate.py): a process forking while the node cache's download
threads fetch a range waits for that range, so the child never inherits a lock one of
them held; work asked for during the fork starts after it."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path
from typing import Any

from shardwise.storage.cache import NodeCache
from shardwise.storage.cache.entry import Extent
from shardwise.storage.forkgate import ForkGate

HELD = threading.Lock()  # stands for a lock a download thread holds mid-range (a library's)


def _child(result: Any) -> None:
    result.put(HELD.acquire(timeout=3))


def test_a_fork_waits_for_the_range_a_download_thread_is_fetching(tmp_path: Path) -> None:
    entered = threading.Event()
    data = bytes(range(256)) * 64

    def read_range(start: int, end: int, view: memoryview) -> None:
        with HELD:
            entered.set()
            time.sleep(0.5)
            view[:] = data[start:end]

    cache = NodeCache(str(tmp_path / "c"), 10**6)
    ext = Extent("s3://bucket/obj", 0, len(data), "v1")
    cache.fetch_ahead(ext, read_range)
    assert entered.wait(10) and HELD.locked()  # a download thread is mid-range, holding it
    ctx = mp.get_context("fork")
    result = ctx.SimpleQueue()
    child = ctx.Process(target=_child, args=(result,))
    child.start()  # forks once the range is in
    child.join(30)
    assert child.exitcode == 0 and result.get() is True  # the child could take the lock
    for _ in range(500):
        if cache.has(ext):
            break
        time.sleep(0.01)
    assert cache.has(ext)  # and the download went on after the fork


def test_work_asked_for_during_a_fork_starts_after_it() -> None:
    gate = ForkGate()
    order: list[str] = []
    with gate.working():
        forking = threading.Thread(target=lambda: (gate.before_fork(), order.append("forked")))
        forking.start()
        time.sleep(0.2)
        assert order == []  # the fork waits for the work in progress
    forking.join(10)
    started = threading.Event()

    def work() -> None:
        with gate.working():
            order.append("work")
            started.set()

    later = threading.Thread(target=work)
    later.start()
    assert not started.wait(0.3)  # held back while the process forks
    gate.after_fork_in_parent()
    assert started.wait(10)
    later.join(10)
    assert order == ["forked", "work"]
