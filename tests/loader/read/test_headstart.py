"""The epoch head start's threads and forks: a DataLoader forking its workers while the
head start plans or downloads must not hand a child a lock held by one of its threads."""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise import index_dataset
from shardwise.loader.read.headstart import HeadStart
from shardwise.storage.cache import NodeCache

HELD = threading.Lock()  # stands for an import lock a planning or downloading thread holds


class _SlowPlan:
    """A plan whose making holds :data:`HELD` for a while (as an import in it would)."""

    def __init__(self, entered: threading.Event) -> None:
        self.entered = entered

    def __call__(self) -> Any:
        with HELD:
            self.entered.set()
            time.sleep(0.5)
        return self

    def worker(self, rank: int, worker_id: int) -> Any:
        return self

    def units(self) -> list[int]:
        return []


def _child(result: Any) -> None:
    result.put(HELD.acquire(timeout=3))


def test_a_fork_waits_for_the_head_start_to_let_go_of_its_locks(tmp_path: Path) -> None:
    pq.write_table(pa.table({"x": list(range(10))}), str(tmp_path / "a.parquet"))
    head = HeadStart(
        index_dataset(str(tmp_path / "a.parquet"), progress=False),
        NodeCache(str(tmp_path / "c"), 10**6),
    )
    entered = threading.Event()
    head.start(_SlowPlan(entered), 0, 2, 10**6)  # type: ignore[arg-type]
    assert entered.wait(10) and HELD.locked()  # a head-start thread is planning, holding the lock
    ctx = mp.get_context("fork")
    result = ctx.SimpleQueue()
    child = ctx.Process(target=_child, args=(result,))
    child.start()  # forks only once the planning is done
    child.join(30)
    assert child.exitcode == 0 and result.get() is True  # the child could take the lock
    head.join(10)
    assert not any(t.is_alive() for t in head._threads)
