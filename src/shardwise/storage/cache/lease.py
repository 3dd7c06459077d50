"""Who holds what in a node-local cache: process identities that survive ``kill -9``
checks, and ``flock`` locks that the kernel releases when their holder dies.

An *owner* names one process on one boot: ``<boot id>-<pid>-<start time>``. The boot
id (``/proc/sys/kernel/random/boot_id``) tells a previous boot's files apart; the start
time (clock ticks since boot, ``/proc/<pid>/stat``) tells a recycled pid apart. An owner
is alive only while all three match a running process, so a lease or reservation left by
a killed process, or by a process of an earlier boot, is recognised as stale.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from functools import lru_cache

__all__ = ["FileLock", "SharedLock", "is_alive", "owner_id"]


NO_BOOT = "noboot"  # the boot id where the kernel does not say


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot's id (16 hex digits), or :data:`NO_BOOT` where the kernel does not say."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip().replace("-", "")[:16]
    except OSError:
        return NO_BOOT


def start_time(pid: int) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot; None if it is not running
    (0 where ``/proc`` is missing but the process exists)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return None
    except OSError:
        return _exists(pid)
    # the command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = stat[stat.rfind(b")") + 2 :].split()
    if fields and fields[0] in (b"Z", b"X"):  # a zombie holds nothing
        return None
    return int(fields[19])


def _exists(pid: int) -> int | None:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        return 0
    return 0


_OWNER: tuple[int, str] | None = None


def owner_id() -> str:
    """This process's owner name (recomputed after a fork)."""
    global _OWNER
    pid = os.getpid()
    if _OWNER is None or _OWNER[0] != pid:
        _OWNER = (pid, f"{boot_id()}-{pid}-{start_time(pid) or 0}")
    return _OWNER[1]


def is_alive(owner: str) -> bool:
    """True if ``owner`` (as made by :func:`owner_id`) is a process running now."""
    try:
        boot, pid_text, started = owner.rsplit("-", 2)
        pid, ticks = int(pid_text), int(started)
    except ValueError:
        return False
    if boot != boot_id():
        return False
    now = start_time(pid)
    return now is not None and (now == ticks or now == 0 or ticks == 0)


class FileLock:
    """An ``flock`` on a file: held until released or until its holder dies.

    Args:
        path: the lock file (created if missing).
        remove: unlink the file when releasing an exclusive lock (per-entry locks, so lock
            files do not pile up). Acquiring checks that the locked file is still the one
            at ``path``, so a holder that removed it cannot be raced.
    """

    def __init__(self, path: str, *, remove: bool = False) -> None:
        self.path = path
        self.remove = remove
        self._fd: int | None = None

    def acquire(self, shared: bool = False, timeout: float | None = None) -> bool:
        """Take the lock; wait at most ``timeout`` seconds (forever if None). Returns
        False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        mode = fcntl.LOCK_SH if shared else fcntl.LOCK_EX
        delay = 0.005
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, mode | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                if deadline is not None and time.monotonic() >= deadline:
                    return False
                time.sleep(delay)
                delay = min(0.05, delay * 2)
                continue
            if self._same_file(fd):
                self._fd = fd
                return True
            os.close(fd)  # the holder before us removed it: lock the new one

    def _same_file(self, fd: int) -> bool:
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        """Release the lock (removing the file if asked)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        if self.remove:
            with contextlib.suppress(OSError):
                os.unlink(self.path)
        with contextlib.suppress(OSError):  # for every copy of the descriptor: a process forked
            fcntl.flock(fd, fcntl.LOCK_UN)  # while it was held must not keep holding it
        os.close(fd)

    @contextlib.contextmanager
    def held(self, shared: bool = False) -> Iterator[None]:
        """Hold the lock for a ``with`` block (waiting as long as needed)."""
        self.acquire(shared)
        try:
            yield
        finally:
            self.release()

    def is_free(self) -> bool:
        """True if nobody holds the lock right now (a snapshot)."""
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        finally:
            os.close(fd)
        return True


class SharedLock:
    """A shared ``flock`` on a file that is never removed, held by the threads of one
    process together: the first to enter locks (on a descriptor the process keeps open),
    the last to leave unlocks, so a hit costs two system calls, not an open and a close as
    well. A forked child opens a descriptor of its own (one inherited from the parent
    shares the parent's lock).

    Args:
        path: the lock file (created if missing).
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self._mutex = threading.Lock()
        self._fd: int | None = None
        self._pid = -1
        self._holders = 0

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold the lock (shared) for a ``with`` block (waiting as long as needed)."""
        with self._mutex:
            if self._pid != os.getpid():
                self._fd, self._pid, self._holders = None, os.getpid(), 0
            if self._fd is None:
                self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
            if self._holders == 0:
                fcntl.flock(self._fd, fcntl.LOCK_SH)
            self._holders += 1
        try:
            yield
        finally:
            with self._mutex:
                self._holders -= 1
                if self._holders == 0 and self._fd is not None and self._pid == os.getpid():
                    fcntl.flock(self._fd, fcntl.LOCK_UN)
