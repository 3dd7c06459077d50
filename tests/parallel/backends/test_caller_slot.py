"""The local pool with the calling process as one of its slots (``caller_slot=True``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from shardwise.parallel import parallel_map, report
from shardwise.parallel.backends.local import LocalBackend, caller_pool


def _pid_after(x: int) -> tuple[int, int]:
    time.sleep(0.05)
    report(1)
    return x * x, os.getpid()


def _fails_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError(f"item {x} is bad")
    return x


def _dies_once_in_a_worker(args: tuple[int, str, int]) -> int:
    x, marker, caller = args
    if os.getpid() != caller and not os.path.exists(marker):  # the first item a worker takes
        Path(marker).touch()
        os._exit(9)  # a lost worker: its chunk runs again
    # the caller's slot waits for a worker to take an item: on a loaded machine it could
    # otherwise run all of them while the worker process is still starting
    deadline = time.monotonic() + 120
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.02)
    return x


def test_caller_and_worker_share_the_items_in_order() -> None:
    pool = LocalBackend(2, caller_slot=True)
    try:
        got = parallel_map(_pid_after, range(40), backend=pool, progress=False, chunksize=1)
        again = parallel_map(_pid_after, range(6), backend=pool, progress=False, chunksize=1)
    finally:
        pool.close()
    assert [v for v, _ in got] == [x * x for x in range(40)]
    pids = {p for _, p in got}
    assert os.getpid() in pids and len(pids) == 2  # the caller and one worker process, not two
    assert [v for v, _ in again] == [x * x for x in range(6)]


def test_an_error_in_the_caller_slot_names_its_item() -> None:
    pool = LocalBackend(2, caller_slot=True)
    try:
        with pytest.raises(ValueError, match="item 7 is bad") as info:
            parallel_map(_fails_on_seven, range(12), backend=pool, progress=False, chunksize=1)
        assert getattr(info.value, "task_index", None) == 7
        assert parallel_map(_fails_on_seven, range(5), backend=pool, progress=False) == list(
            range(5)
        )
    finally:
        pool.close()


def test_a_lost_worker_is_replaced_and_its_chunk_run_again(tmp_path: Path) -> None:
    pool = LocalBackend(2, caller_slot=True)
    items = [(x, str(tmp_path / "died"), os.getpid()) for x in range(30)]
    try:
        assert parallel_map(
            _dies_once_in_a_worker, items, backend=pool, progress=False, chunksize=1
        ) == list(range(30))
    finally:
        pool.close()
    assert (tmp_path / "died").exists()


def test_one_slot_runs_in_a_worker_and_the_shared_pool_is_one_instance() -> None:
    pool = LocalBackend(1, caller_slot=True)  # a single slot stays a worker process
    try:
        got = parallel_map(_pid_after, range(3), backend=pool, progress=False)
    finally:
        pool.close()
    assert {p for _, p in got} != {os.getpid()}
    assert caller_pool() is caller_pool() and caller_pool().options == {"caller_slot": True}
