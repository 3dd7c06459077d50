"""A node cache directory's shared bookkeeping: what it holds on disk (:func:`scan_dir`) and
its fetch journal."""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass
from typing import Any

from shardwise.storage.cache.lease import is_alive

__all__ = ["Scan", "append_journal", "read_journal", "scan_dir"]

JOURNAL_MAX = 4 * 2**20


@dataclass
class Scan:
    """What a cache directory holds: entries ``(mtime, size, key)``, leased keys, and the
    bytes of entries plus live reservations."""

    entries: list[tuple[float, int, str]]
    leased: set[str]
    used: int


def scan_dir(root: str, clean: bool = False) -> Scan:
    """Look at a cache directory; ``clean`` removes leases and part files of dead owners."""
    alive: dict[str, bool] = {}

    def live(owner: str) -> bool:
        if owner not in alive:
            alive[owner] = is_alive(owner)
        return alive[owner]

    entries = []
    for e in os.scandir(os.path.join(root, "entries")):
        with contextlib.suppress(FileNotFoundError):
            st = e.stat()
            entries.append((st.st_mtime, st.st_size, e.name))
    leased: set[str] = set()
    for e in os.scandir(os.path.join(root, "leases")):
        key, _, owner = e.name.partition(".")
        if live(owner):
            leased.add(key)
        elif clean:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    reserved = 0
    for e in os.scandir(os.path.join(root, "tmp")):
        parts = e.name.split(".")
        if len(parts) == 4 and parts[1].isdigit() and live(parts[2]):
            reserved += int(parts[1])
        elif clean:
            with contextlib.suppress(OSError):
                os.unlink(e.path)
    return Scan(entries, leased, sum(s for _, s, _ in entries) + reserved)


def append_journal(root: str, record: dict[str, Any]) -> None:
    """Append one JSON line to the node's journal (``journal.log``, rotated to
    ``journal.log.1`` past a few MiB); a failure to write it is ignored."""
    path = os.path.join(root, "journal.log")
    line = json.dumps({"t": round(time.time(), 3), "pid": os.getpid(), **record}) + "\n"
    with contextlib.suppress(OSError):
        if os.path.getsize(path) > JOURNAL_MAX:
            os.replace(path, path + ".1")
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def read_journal(root: str) -> list[dict[str, Any]]:
    """Every record of the node's journal, oldest first (the most recent few MiB)."""
    out: list[dict[str, Any]] = []
    for name in ("journal.log.1", "journal.log"):
        with contextlib.suppress(OSError), open(os.path.join(root, name), encoding="utf-8") as f:
            out.extend(json.loads(line) for line in f if line.strip())
    return out
