"""Which epoch a pass of a ``TokenStream`` streams: the mechanism of ``StreamingDataset``
(:mod:`shardwise.loader.channel`, ``LoaderState.begin_pass``) for token streams.

Each new pass over the stream is the next epoch, unless ``set_epoch`` or
``load_state_dict`` said otherwise since the slot's previous pass: each worker slot (the
training process's pid, the rank and the worker id) keeps a pass record (the control
number and epoch of the last pass it started) in the topology channel, so fresh
(non-persistent) DataLoader workers agree with persistent ones and with the training
process; workers announce the epoch they stream, and ``state_dict`` names it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

from shardwise.loader.channel import Seen, TopologyChannel
from shardwise.loader.placement import in_dataloader_worker
from shardwise.plan import Resume

__all__ = ["Passes"]


@dataclass
class Passes:
    """The epoch and resume point a stream's next pass takes (picklable: it travels to
    DataLoader workers with the stream).

    Attributes:
        channel: the stream's topology channel.
        epoch: the epoch of the current (or next) pass.
        resumes: the interruptions of that epoch.
        control: number of the last epoch/resume published or taken from the channel.
        pinned: a worker's own copy loaded a state: its next pass is that epoch.
        last_pass: the training process's own pass records, by slot.
        set_at: when ``set_epoch`` or ``load_state_dict`` last ran in this process.
    """

    channel: TopologyChannel
    epoch: int = 0
    resumes: list[Resume] = field(default_factory=list)
    control: int = 0
    pinned: bool = False
    last_pass: dict[str, dict[str, int]] = field(default_factory=dict)
    set_at: float = 0.0

    def set(self, epoch: int, resumes: list[Resume]) -> None:
        """Stream ``epoch`` from ``resumes`` next; tell the DataLoader workers."""
        self.epoch, self.resumes = int(epoch), list(resumes)
        if in_dataloader_worker():
            self.pinned = True  # a worker's own copy: its next pass is this epoch
            return
        self.set_at = time.time()
        self.control += 1
        saved = [r.to_dict() for r in self.resumes]
        self.channel.publish({"n": self.control, "epoch": self.epoch, "resumes": saved})

    def begin(self, rank: int, worker_id: int) -> None:
        """Start a pass of ``rank``'s worker ``worker_id``: the epoch set since the slot's
        previous pass, else the epoch after it."""
        worker = in_dataloader_worker()
        if worker:
            self._follow()
            slot = f"{os.getppid()}.{rank}.{worker_id}"
            last = self.channel.last_pass(slot)
        else:
            slot = f"{rank}.{worker_id}"
            last = self.last_pass.get(slot)
        if not self.pinned and last is not None and last["n"] == self.control:
            self.epoch, self.resumes = last["epoch"] + 1, []  # a new pass: the next epoch
        self.pinned = False
        if worker:
            self.channel.record_pass(slot, self.control, self.epoch)
        else:
            self.last_pass[slot] = {"n": self.control, "epoch": self.epoch}

    def _follow(self) -> None:
        control: dict[str, Any] | None = self.channel.control()
        if control is not None and int(control["n"]) > self.control:
            self.control = int(control["n"])  # newer than this worker's copy: take it
            self.epoch = int(control["epoch"])
            self.resumes = [Resume.from_dict(r) for r in control["resumes"]]

    def sync(self, own: Seen | None) -> int:
        """The epoch the latest pass streamed: this process's own (``own``) or the one
        DataLoader workers reported, whichever began later (and after the last set)."""
        if in_dataloader_worker():
            return self.epoch
        seen = [s for s in (own, self.channel.read()) if s is not None]
        if seen:
            latest = max(seen, key=lambda s: s.at)
            if latest.at > self.set_at and latest.epoch not in (None, self.epoch):
                self.epoch, self.resumes = int(latest.epoch), []
        return self.epoch
