"""Batches made on a loader thread, ahead of the training loop.

:func:`made_ahead` runs a generator of groups of batches (a window's batches: one
hand-over per group, not per batch) on a thread of its own and yields their batches in
order while the thread makes the next groups, at most ``depth`` of them ahead. NumPy's
copies and Arrow's decoding release the GIL, so the batches are made while the training
thread runs the model. An error in the thread is raised in the loop; a loop that stops
early (or is dropped) stops the thread and closes the generator, which lets its readers go.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import Any, TypeVar

__all__ = ["made_ahead"]

T = TypeVar("T")
POLL_S = 0.1  # how often a thread blocked on a full queue checks that the loop still runs


def _put(q: queue.Queue[Any], item: Any, stop: threading.Event) -> bool:
    """Put ``item`` unless the loop stopped first; whether it was put."""
    while not stop.is_set():
        try:
            q.put(item, timeout=POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _run(
    groups: Generator[list[T], None, None],
    q: queue.Queue[Any],
    stop: threading.Event,
) -> None:
    try:
        for group in groups:
            if not _put(q, ("group", group), stop):
                return
        _put(q, ("end", None), stop)
    except Exception as exc:  # noqa: BLE001  (handed to the loop, which raises it)
        _put(q, ("error", exc), stop)
    finally:
        groups.close()


def made_ahead(groups: Generator[list[T], None, None], depth: int = 2) -> Iterator[T]:
    """The items of ``groups``' lists, in order, the lists made on a thread of their own."""
    q: queue.Queue[Any] = queue.Queue(maxsize=max(1, depth))
    stop = threading.Event()
    thread = threading.Thread(
        target=_run, args=(groups, q, stop), name="shardwise-tokens-batches", daemon=True
    )
    thread.start()
    try:
        while True:
            kind, value = q.get()
            if kind == "group":
                yield from value
            elif kind == "error":
                raise value
            else:
                return
    finally:
        stop.set()
