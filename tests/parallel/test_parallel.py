"""Conformance suite: the same contract on every backend, each on its real engine."""

from __future__ import annotations

import functools
import itertools
import os
import time
from pathlib import Path
from typing import Any

import pytest
from _tasks import (
    Flaky,
    big,
    counting,
    fail_on_seven,
    flaky_once,
    kill_worker_once,
    kill_worker_twice,
    sleepy,
    square,
    unpicklable_error,
)

from shardwise.errors import ConfigError, TaskError
from shardwise.parallel import (
    Backend,
    active_backend,
    imap_unordered,
    known_backends,
    parallel_backend,
    parallel_map,
    register_backend,
)

pytestmark = pytest.mark.engine


def test_order_is_input_order(backend: Backend) -> None:
    items = list(range(257))
    assert parallel_map(square, items, backend=backend, progress=False) == [x * x for x in items]
    assert parallel_map(square, items, backend=backend, progress=False, chunksize=5) == [
        x * x for x in items
    ]


def test_empty_input(backend: Backend) -> None:
    assert parallel_map(square, [], backend=backend, progress=False) == []
    assert list(imap_unordered(square, iter([]), backend=backend, progress=False)) == []


def test_ten_thousand_tiny_items(backend: Backend) -> None:
    out = parallel_map(square, range(10_000), backend=backend, progress=False)
    assert len(out) == 10_000
    assert out[9_999] == 9_999 * 9_999
    assert sum(out) == sum(x * x for x in range(10_000))


def test_results_larger_than_10mb(backend: Backend) -> None:
    out = parallel_map(big, [1, 2, 3], backend=backend, progress=False, chunksize=1)
    assert [len(b) for b in out] == [11 * 1024 * 1024] * 3
    assert [b[0] for b in out] == [1, 2, 3]


def test_task_error_carries_index_and_traceback(backend: Backend) -> None:
    with pytest.raises(ValueError, match="bad item 7") as info:
        parallel_map(fail_on_seven, range(20), backend=backend, progress=False, chunksize=3)
    assert info.value.task_index == 7  # type: ignore[attr-defined]
    assert "fail_on_seven" in info.value.remote_traceback  # type: ignore[attr-defined]
    assert any("parallel task 7" in n for n in info.value.__notes__)


def test_unpicklable_error_becomes_task_error(backend: Backend) -> None:
    with pytest.raises(TaskError) as info:
        parallel_map(unpicklable_error, range(4), backend=backend, progress=False)
    assert info.value.index == 2
    assert "Unpicklable" in str(info.value) and "unpicklable_error" in info.value.remote_traceback


def test_declared_transient_error_is_retried(backend: Backend, tmp_path: Any) -> None:
    items = [(str(tmp_path), i) for i in range(6)]
    assert parallel_map(
        flaky_once, items, backend=backend, progress=False, retry_on=(Flaky,)
    ) == list(range(6))


def test_undeclared_error_is_not_retried(backend: Backend, tmp_path: Any) -> None:
    items = [(str(tmp_path), i) for i in range(6)]
    with pytest.raises(Flaky) as info:
        parallel_map(flaky_once, items, backend=backend, progress=False)
    assert info.value.task_index == 2  # type: ignore[attr-defined]


def test_sigkilled_worker_is_retried(process_backend: Backend, tmp_path: Any) -> None:
    items = [(str(tmp_path), i) for i in range(12)]
    out = parallel_map(
        kill_worker_once, items, backend=process_backend, progress=False, chunksize=1
    )
    assert out == [i * 10 for i in range(12)]
    assert (tmp_path / "killed").exists()  # the kill really happened


def test_two_workers_killed_in_one_run(process_backend: Backend, tmp_path: Any) -> None:
    # the second kill may take the last worker holding state the engine shipped at the
    # start of the run (dask's scattered function); the run must still finish
    items = [(str(tmp_path), i) for i in range(16)]
    out = parallel_map(
        kill_worker_twice, items, backend=process_backend, progress=False, chunksize=1
    )
    assert out == [i * 10 for i in range(16)]
    assert (tmp_path / "killed-3").exists() and (tmp_path / "killed-8").exists()


def test_worker_killed_every_time_gives_up(tmp_path: Any) -> None:
    from shardwise.parallel import get_backend

    b = get_backend("local", 2)
    try:
        items = [(str(tmp_path), 3)]
        # with max_retries=0 the first lost worker is final
        with pytest.raises(TaskError, match="worker lost"):
            parallel_map(kill_worker_once, items, backend=b, progress=False, max_retries=0)
        # the pool recovered: a fresh worker serves the next call
        assert parallel_map(square, [4], backend=b, progress=False) == [16]
    finally:
        b.close()


def test_progress_reaches_total(backend: Backend, capsys: pytest.CaptureFixture[str]) -> None:
    parallel_map(square, range(300), backend=backend, desc="squares", progress=True)
    err = capsys.readouterr().err
    assert "squares" in err
    assert "300/300" in err


@pytest.mark.parametrize("name", ["local", "thread", "ray", "spark", "dask"])
def test_task_counter_reported(
    name: str, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    from _engines import make_backend

    b = make_backend(name, request)
    try:
        out = parallel_map(
            counting,
            [1000, 2000, 3000],
            backend=b,
            progress=True,
            desc="count",
            count_unit="rows",
            chunksize=1,
        )
    finally:
        b.close()
    assert out == [1000, 2000, 3000]
    assert "6000rows" in capsys.readouterr().err.replace(" ", "")


@pytest.mark.engine
@pytest.mark.parametrize("name", ["ray", "spark", "dask"])
def test_counters_arrive_while_the_task_runs(name: str, request: pytest.FixtureRequest) -> None:
    from _engines import make_backend
    from _tasks import trickle

    b = make_backend(name, request)
    session = b.open(trickle, (), 1)
    try:
        session.submit(0, [(0, 60)])  # six seconds of reports
        seen, finished = 0, []
        deadline = time.monotonic() + 120
        while not finished and time.monotonic() < deadline:
            finished = session.wait(0.3)
            if not finished:
                seen += session.counters()
                if 0 < seen < 60:
                    break  # part of the count arrived while the task was still running
        assert 0 < seen < 60 and not finished, (seen, finished)
        while not finished:
            finished = session.wait(0.5)
        time.sleep(0.5)
        seen += session.counters()
        assert seen == 60
    finally:
        session.close(cancel=True)
        b.close()


@pytest.mark.parametrize("name", ["sequential", "thread", "local"])
def test_an_exception_whose_cause_does_not_pickle_still_arrives_as_itself(name: str) -> None:
    from _tasks import ChainPickled, fail_with_unpicklable_cause

    with pytest.raises(ChainPickled, match="item 3 failed") as info:
        parallel_map(fail_with_unpicklable_cause, [3], backend=name, progress=False)
    assert "Unpicklable" in info.value.remote_traceback  # type: ignore[attr-defined]


def test_imap_unordered_streams_with_bounded_in_flight() -> None:
    pulled = itertools.count()
    state = {"max_ahead": 0, "yielded": 0}

    def source() -> Any:
        for i in range(100_000):
            n = next(pulled)
            state["max_ahead"] = max(state["max_ahead"], n - state["yielded"])
            yield i

    seen = set()
    for index, value in imap_unordered(
        square,
        source(),
        backend="thread",
        num_proc=2,
        chunksize=10,
        max_in_flight=4,
        progress=False,
    ):
        assert value == index * index
        seen.add(index)
        state["yielded"] += 1
    assert len(seen) == 100_000
    assert state["max_ahead"] <= 4 * 10 + 10


@pytest.mark.parametrize("name", ["local", "ray", "dask"])
def test_closing_the_stream_cancels_outstanding_work(
    name: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from _engines import make_backend

    b = make_backend(name, request)
    release = tmp_path / "release"  # ends tasks an engine cannot stop (Dask's threads)
    try:
        start = time.monotonic()
        task = functools.partial(sleepy, release=str(release))
        gen = imap_unordered(task, range(4), backend=b, progress=False, chunksize=1)
        assert next(gen) == (0, 0)
        gen.close()
        assert time.monotonic() - start < 15  # the 20 s tasks were not awaited
        release.touch()
        assert parallel_map(square, [3], backend=b, progress=False) == [9]
    finally:
        release.touch()
        b.close()


def test_context_manager_nests_and_restores() -> None:
    assert active_backend() is None
    with parallel_backend("thread", n_jobs=3) as outer:
        assert active_backend() is outer
        with parallel_backend("sequential") as inner:
            assert active_backend() is inner
        assert active_backend() is outer
    assert active_backend() is None


class _Recording(Backend):
    name = "recording"
    opened = 0

    def slots(self) -> int:
        return 1

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Any:
        from shardwise.parallel.backends.local import SequentialBackend

        type(self).opened += 1
        return SequentialBackend().open(fn, retry_on, parallelism)


def test_context_reaches_deep_calls_and_explicit_backend_wins(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardwise import index_dataset

    register_backend("recording", _Recording)
    for i in range(3):
        pq.write_table(pa.table({"x": list(range(i + 1))}), tmp_path / f"p{i}.parquet")
    with parallel_backend("recording"):
        ds = index_dataset(str(tmp_path), progress=False)
        assert _Recording.opened >= 1
        before = _Recording.opened
        assert parallel_map(square, [2], backend="sequential", progress=False) == [4]
        assert _Recording.opened == before
    assert ds.num_samples == 6


def test_unknown_backend_lists_known_ones() -> None:
    with pytest.raises(ConfigError, match="known backends: .*dask.*local.*ray.*spark"):
        parallel_map(square, [1], backend="mpi")
    assert {"local", "thread", "sequential", "joblib", "ray", "spark", "dask"} <= set(
        known_backends()
    )


def test_bad_num_proc() -> None:
    with pytest.raises(ConfigError):
        parallel_map(square, [1], num_proc=0, backend="thread")


def test_num_proc_minus_one_uses_all_slots(request: pytest.FixtureRequest) -> None:
    from _engines import make_backend

    b = make_backend("ray", request)
    assert b.slots() == 2
    assert parallel_map(square, range(10), num_proc=-1, backend=b, progress=False)[-1] == 81


_DRIVER = """
import os, sys, time
from shardwise import parallel_map

def slow(x, where=sys.argv[1]):  # the worker's own argv is not the driver's
    open(os.path.join(where, f"started-{os.getpid()}"), "w").close()
    time.sleep(20)
    open(os.path.join(where, "finished"), "w").close()
    return x

parallel_map(slow, [1, 2, 3, 4], backend="local", num_proc=2, progress=False)
"""


def test_workers_end_soon_after_their_driver_is_killed(tmp_path: Any) -> None:
    """A driver killed outright (SIGKILL, or SIGTERM, which runs no cleanup) leaves no
    worker running its task to the end for nobody."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "driver.py"
    script.write_text(_DRIVER)
    driver = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    deadline = time.time() + 120
    pids: list[int] = []
    while not pids and time.time() < deadline:  # a worker's (the driver may run one too)
        time.sleep(0.1)
        pids = [int(p.name.split("-")[1]) for p in tmp_path.glob("started-*")]
        pids = [pid for pid in pids if pid != driver.pid]
    assert pids
    driver.send_signal(signal.SIGKILL)
    driver.wait()
    time.sleep(3)
    alive = [pid for pid in pids if os.path.exists(f"/proc/{pid}") and _running(pid)]
    assert alive == [] and not (tmp_path / "finished").exists()


def _running(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(")")[-1].split()[0] != "Z"
