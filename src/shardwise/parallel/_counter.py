"""Counters from running tasks over TCP, for engines without a channel of their own (Spark).

The driver listens on its own host (the address executors already reach it at); a task
connects, sends the numbers it passes to :func:`shardwise.parallel.report` as text lines,
batched, and closes. Reporting is best effort: a task that cannot connect still runs.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from shardwise.parallel._in_worker import Outcome, Throttled, run_chunk, set_reporter

__all__ = ["CounterServer", "run_chunk_counted"]


class CounterServer:
    """Sums the integers that tasks send; :meth:`take` returns the sum since the last call."""

    def __init__(self, host: str) -> None:
        self._sock = socket.create_server((host, 0))
        self.address: tuple[str, int] = (host, int(self._sock.getsockname()[1]))
        self._total = 0
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept, name="shardwise-counter", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        with conn, conn.makefile("r") as lines:
            for line in lines:
                with contextlib.suppress(ValueError), self._lock:
                    self._total += int(line)

    def take(self) -> int:
        with self._lock:
            n, self._total = self._total, 0
        return n

    def close(self) -> None:
        self._closed = True
        self._sock.close()


@contextlib.contextmanager
def _sender(address: tuple[str, int]) -> Iterator[Callable[[int], None]]:
    try:
        sock: socket.socket | None = socket.create_connection(address, timeout=5)
    except OSError:
        sock = None

    def send(n: int) -> None:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.sendall(f"{n}\n".encode())

    try:
        yield send
    finally:
        if sock is not None:
            sock.close()


def run_chunk_counted(
    fn: Callable[[Any], Any],
    chunk: Sequence[tuple[int, Any]],
    retry_on: tuple[type[BaseException], ...],
    address: tuple[str, int],
) -> list[Outcome]:
    """:func:`run_chunk` with ``report`` sent to the :class:`CounterServer` at ``address``."""
    with _sender(address) as send:
        sink = Throttled(send)
        set_reporter(sink)
        try:
            return run_chunk(fn, chunk, retry_on)
        finally:
            sink.flush()
            set_reporter(None)
