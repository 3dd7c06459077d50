"""Worker processes of the ``local`` backend: fresh interpreters that never run the
caller's ``__main__``.

``multiprocessing`` (spawn and forkserver alike) re-imports the main script in every
worker, which runs a script without an ``if __name__ == "__main__":`` guard again in
each of them, and cannot find functions defined in a notebook, ``python -c`` or stdin.
shardwise starts ``python -m shardwise.parallel.backends.local_worker`` instead, hands it the
caller's
``sys.path``, and sends functions pickled by value when they live in ``__main__``.

A worker's stderr goes to the caller's stderr line by line, and its last lines are
kept: a worker that dies before it is ready raises :class:`WorkerStartError` with its
exit code or signal and those lines, instead of being retried.
"""

from __future__ import annotations

import collections
import multiprocessing.connection as mpc
import os
import pickle
import signal
import socket
import subprocess
import sys
import threading
from typing import IO

from shardwise.errors import ShardwiseError

__all__ = ["WorkerProcess", "WorkerStartError", "describe_exit"]

START_TIMEOUT = 120.0
TAIL_LINES = 20


class WorkerStartError(ShardwiseError, RuntimeError):
    """A worker process exited before it was ready to take tasks."""


def describe_exit(code: int | None) -> str:
    """``exit code 3``, ``signal SIGKILL`` or ``still running``."""
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"signal {signal.Signals(-code).name}"
        except ValueError:
            return f"signal {-code}"
    return f"exit code {code}"


class WorkerProcess:
    """One worker: a child interpreter, its socket and the tail of its stderr."""

    def __init__(self, wait: bool = True) -> None:
        """Start the worker; with ``wait`` (the default) return once it is ready, else
        call :meth:`wait_ready` before sending it work (several start side by side)."""
        ours, theirs = socket.socketpair()
        self.tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        try:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "shardwise.parallel.backends.local_worker",
                    str(theirs.fileno()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=_child_env(),
            )
        finally:
            theirs.close()
        self.conn = mpc.Connection(ours.detach())
        self._forward = threading.Thread(
            target=_forward,
            args=(self.proc.stderr, self.tail),
            name="shardwise-worker-stderr",
            daemon=True,
        )
        self._forward.start()
        self.pid = self.proc.pid
        self.conn.send_bytes(pickle.dumps(("init", list(sys.path))))
        if wait:
            self.wait_ready()

    def wait_ready(self) -> None:
        """Block until the worker is ready for tasks; raise :class:`WorkerStartError` if it
        dies first."""
        if self.conn.poll(START_TIMEOUT):
            try:
                kind, _ = pickle.loads(self.conn.recv_bytes())
                if kind == "ready":
                    return
            except (EOFError, OSError):
                pass
        self.kill()
        self._forward.join(5)
        lines = "\n".join(self.tail) or "(nothing on stderr)"
        raise WorkerStartError(
            f"a local worker process could not start ({describe_exit(self.exitcode)}); "
            f"its last stderr lines:\n{lines}"
        )

    @property
    def sentinel(self) -> int:
        """A handle that becomes readable when the worker sends or dies."""
        return self.conn.fileno()

    @property
    def exitcode(self) -> int | None:
        return self.proc.poll()

    def is_alive(self) -> bool:
        return self.proc.poll() is None

    def describe(self) -> str:
        """Why a worker is gone, with the last lines it wrote to stderr."""
        self._forward.join(1)
        tail = ("; last stderr lines:\n" + "\n".join(self.tail)) if self.tail else ""
        return f"worker pid {self.pid} ended ({describe_exit(self.exitcode)}){tail}"

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def join(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def close(self) -> None:
        self.conn.close()


def _child_env() -> dict[str, str]:
    """The caller's environment, with shardwise itself importable even when the caller
    found it through a ``sys.path`` entry added at run time."""
    env = dict(os.environ)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env["SHARDWISE_LOCAL_WORKER"] = "1"  # lets site hooks and tools tell workers apart
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    return env


def _forward(stream: IO[bytes] | None, tail: collections.deque[str]) -> None:
    """Copy a worker's stderr to ours, keeping the last lines."""
    if stream is None:
        return
    out = getattr(sys.stderr, "buffer", None)
    for raw in iter(stream.readline, b""):
        tail.append(raw.decode(errors="replace").rstrip("\n"))
        try:
            if out is not None:
                out.write(raw)
                out.flush()
            else:
                sys.stderr.write(raw.decode(errors="replace"))
        except (OSError, ValueError):
            pass
    stream.close()
