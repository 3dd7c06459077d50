"""The loop of a ``local`` pool worker: a fresh interpreter started by
:mod:`shardwise.parallel.backends.local_procs`, talking to the driver over one socket.

The worker never imports the driver's ``__main__``: functions defined there (in a
script, a notebook, ``python -c`` or stdin) arrive pickled by value (cloudpickle), so a
script without an ``if __name__ == "__main__":`` guard is not run again in every worker.
"""

from __future__ import annotations

import multiprocessing.connection as mpc
import os
import pickle
import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["main"]


def dumps(obj: Any) -> bytes:
    """Pickle ``obj``, with cloudpickle when plain pickle cannot (lambdas, closures) or
    would name something of ``__main__`` (a function or class of the driver's script,
    notebook or ``-c``, which the worker never imports): cloudpickle sends those by value.
    (A pickle naming ``__main__`` holds those bytes; data that merely holds them too only
    takes the slower way.)"""
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        if b"__main__" not in data:
            return data
    except (pickle.PicklingError, AttributeError, TypeError):
        pass
    import cloudpickle

    by_value: bytes = cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    return by_value


def _end_with_the_driver(driver: int, every: float = 0.5) -> None:
    """End this worker when the driver that started it is gone (killed, say, by SIGTERM,
    which runs no cleanup): a task it was running would otherwise go on for its whole
    length, and commit its output, for nobody."""

    def watch() -> None:
        while os.getppid() == driver:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, name="shardwise-driver-watch", daemon=True).start()


def main(fd: int) -> None:
    """Serve the driver on the socket ``fd`` until it says stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the driver's to handle
    _end_with_the_driver(os.getppid())
    from shardwise.parallel._malloc import keep_freed_memory

    keep_freed_memory()  # before the task's arrays: freed ones are reused, not faulted in again
    conn = mpc.Connection(fd)
    kind, sys_path = pickle.loads(conn.recv_bytes())
    if kind == "init":
        sys.path[:] = sys_path  # modules the driver can import, this worker can too
    from shardwise.parallel import _in_worker
    from shardwise.parallel._in_worker import Throttled, run_chunk

    counter = Throttled(lambda n: conn.send_bytes(dumps(("count", n))))
    _in_worker.set_reporter(counter)
    conn.send_bytes(dumps(("ready", os.getpid())))
    fns: dict[int, tuple[Callable[[Any], Any], tuple[type[BaseException], ...]]] = {}
    while True:
        try:
            msg = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return
        if msg[0] == "fn":
            fns.clear()
            fns[msg[1]] = _load_fn(msg[2])
            if len(msg) > 3 and msg[3]:  # the driver waits for it before sending chunks
                conn.send_bytes(dumps(("loaded", msg[1])))
        elif msg[0] == "chunk":
            _, key, chunk_id, chunk = msg
            fn, retry_on = fns[key]
            result = run_chunk(fn, chunk, retry_on)
            counter.flush()
            conn.send_bytes(dumps(("done", chunk_id, result)))
        else:
            return


def _load_fn(blob: bytes) -> tuple[Callable[[Any], Any], tuple[type[BaseException], ...]]:
    """The task function, or one that raises why it could not be loaded here (so the
    error reaches the caller for every item instead of killing the worker)."""
    try:
        fn, retry_on = pickle.loads(blob)
    except Exception as exc:  # noqa: BLE001 - reported per item by run_chunk
        error = exc

        def broken(item: Any) -> Any:
            raise error

        return broken, ()
    return fn, retry_on


if __name__ == "__main__":
    main(int(sys.argv[1]))
