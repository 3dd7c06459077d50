"""Task functions for the parallel conformance suite (importable by every engine's workers)."""

from __future__ import annotations

import os
import signal
import time


class Flaky(Exception):
    """A transient error the tests declare retryable."""


def square(x: int) -> int:
    return x * x


def big(x: int) -> bytes:
    return bytes([x % 256]) * (11 * 1024 * 1024)


def fail_on_seven(x: int) -> int:
    if x == 7:
        raise ValueError(f"bad item {x}")
    return x


def _first_time(marker_dir: str, name: str) -> bool:
    path = os.path.join(marker_dir, name)
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def kill_worker_once(arg: tuple[str, int]) -> int:
    """SIGKILL the worker process the first time item 3 runs."""
    marker_dir, x = arg
    if x == 3 and _first_time(marker_dir, "killed"):
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def kill_worker_twice(arg: tuple[str, int]) -> int:
    """SIGKILL a worker the first time item 3 runs and again the first time item 8 runs."""
    marker_dir, x = arg
    if x in (3, 8) and _first_time(marker_dir, f"killed-{x}"):
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def flaky_once(arg: tuple[str, int]) -> int:
    marker_dir, x = arg
    if x == 2 and _first_time(marker_dir, "flaky"):
        raise Flaky("try again")
    return x


def sleepy(x: int, release: str = "") -> int:
    """``x`` at once for 0; else after 20 s, or as soon as the file ``release`` exists."""
    deadline = time.monotonic() + 20
    while x and time.monotonic() < deadline and not (release and os.path.exists(release)):
        time.sleep(0.05)
    return x


def counting(n: int) -> int:
    from shardwise.parallel import report

    for _ in range(n):
        report(1)
    return n


def trickle(n: int) -> int:
    """Report one unit every 0.1 s, ``n`` times (a task whose counter grows while it runs)."""
    from shardwise.parallel import report

    for _ in range(n):
        report(1)
        time.sleep(0.1)
    return n


class Unpicklable(Exception):
    def __init__(self, handle: object) -> None:
        super().__init__("holds a lock")
        self.handle = handle


def unpicklable_error(x: int) -> int:
    import threading

    if x == 2:
        raise Unpicklable(threading.Lock())
    return x


def kill_once_in_map(batch, *, marker_dir: str):  # type: ignore[no-untyped-def]
    """A pipeline mapper that SIGKILLs its worker the first time it runs (pipeline tests)."""
    if _first_time(marker_dir, "map-killed"):
        os.kill(os.getpid(), signal.SIGKILL)
    return batch


def drop_odd(batch):  # type: ignore[no-untyped-def]
    import pyarrow.compute as pc

    return pc.equal(pc.bit_wise_and(batch.column("id"), 1), 0), "odd id"


def fail_after_marker(batch, *, marker_dir: str):  # type: ignore[no-untyped-def]
    """A mapper that raises in every task once a marker file exists (a failing run)."""
    if os.path.exists(os.path.join(marker_dir, "fail")):
        raise RuntimeError("simulated failure in the middle of a run")
    return batch


class ChainPickled(Exception):
    """Pickles its cause along, as tblib's pickling hook does for every exception."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild_chained, (self.args, self.__cause__))


def _rebuild_chained(args, cause):  # type: ignore[no-untyped-def]
    exc = ChainPickled(*args)
    exc.__cause__ = cause
    return exc


def fail_with_unpicklable_cause(x: int) -> int:
    import threading

    raise ChainPickled(f"item {x} failed") from Unpicklable(threading.Lock())
