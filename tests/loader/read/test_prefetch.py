"""Prefetcher: order kept, budget respected, errors and early stops handled."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Executor, Future
from typing import Any

import pytest

from shardwise.errors import ConfigError
from shardwise.loader.read.prefetch import Prefetcher


def test_items_come_in_key_order_whatever_the_load_times() -> None:
    def load(k: int) -> int:
        time.sleep(0.002 * (k % 3))
        return k * 10

    p = Prefetcher(load, lambda k: 1, budget_bytes=100, threads=3, max_ahead=5)
    assert list(p.iterate(range(30))) == [k * 10 for k in range(30)]


def test_bytes_held_ahead_stay_under_the_budget_but_one_big_item_still_loads() -> None:
    held: list[int] = []
    in_flight = 0
    lock = threading.Lock()

    def load(k: int) -> int:
        nonlocal in_flight
        with lock:
            in_flight += 1
            held.append(in_flight)
        time.sleep(0.001)
        with lock:
            in_flight -= 1
        return k

    sizes = {k: (50 if k == 7 else 10) for k in range(20)}
    p = Prefetcher(load, sizes.__getitem__, budget_bytes=30, threads=4, max_ahead=10)
    out = []
    for item in p.iterate(range(20)):
        out.append(item)
        time.sleep(0.002)  # a slow consumer: reads ahead pile up to the budget
    assert out == list(range(20))
    assert p.peak_bytes <= 50  # the 50-byte item alone, never more than the budget otherwise
    assert max(held) <= 3


def test_a_failing_load_reaches_the_consumer_in_order() -> None:
    def load(k: int) -> int:
        if k == 4:
            raise OSError("unit 4 is unreadable")
        return k

    got = []
    with pytest.raises(OSError, match="unit 4"):
        for item in Prefetcher(load, lambda k: 1).iterate(range(10)):
            got.append(item)
    assert got == [0, 1, 2, 3]


def test_stopping_early_cancels_pending_reads_and_leaves_no_thread() -> None:
    loaded: list[int] = []
    p = Prefetcher(lambda k: loaded.append(k) or k, lambda k: 1, threads=2, max_ahead=4)
    it = p.iterate(range(1000))
    assert [next(it) for _ in range(3)] == [0, 1, 2]
    it.close()
    assert len(loaded) <= 3 + 4 + 2
    assert not [t for t in threading.enumerate() if t.name.startswith("shardwise-prefetch")]


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        Prefetcher(lambda k: k, lambda k: 1, budget_bytes=-1)
    with pytest.raises(ConfigError):
        Prefetcher(lambda k: k, lambda k: 1, threads=0)


def test_ahead_is_told_each_key_once_in_order_within_its_budget() -> None:
    told: list[int] = []
    seen_at_load: dict[int, list[int]] = {}

    def load(k: int) -> int:
        seen_at_load[k] = list(told)
        return k

    sizes = {k: 10 for k in range(12)}
    p = Prefetcher(
        load,
        lambda k: 100,  # in memory: one item at a time
        budget_bytes=100,
        threads=1,
        max_ahead=5,
        ahead=told.append,
        ahead_size=sizes.__getitem__,
        ahead_bytes=30,  # three keys told ahead of the loads
    )
    out = []
    for item in p.iterate(range(12)):
        out.append(item)
        assert len([k for k in told if k > item]) <= 3 + 1  # never far ahead
    assert out == list(range(12))
    assert told == list(range(1, 12))  # the first key is loaded at once, never told
    assert all(k in seen_at_load[k] for k in range(1, 12))  # told before its load


class _Now(Executor):
    """Runs each load as it is submitted: what was submitted is what was loaded."""

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


def test_reads_held_to_the_first_keys_until_released() -> None:
    loaded: list[int] = []
    p = Prefetcher(lambda k: loaded.append(k) or k, lambda k: 1, max_ahead=8, executor=_Now())
    p.hold_after = 2  # a head window's parts: the next window waits for its first piece
    it = p.iterate(range(6))
    assert next(it) == 0 and loaded == [0, 1]
    assert next(it) == 1 and loaded == [0, 1]
    assert next(it) == 2 and loaded == [0, 1, 2]  # needed now: read, the rest still held
    p.hold_after = None
    assert next(it) == 3 and loaded == [0, 1, 2, 3, 4, 5]
    assert list(it) == [4, 5]
