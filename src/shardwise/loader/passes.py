"""Which epoch a pass over a dataset streams, in the training process and in DataLoader
workers: the one mechanism of ``StreamingDataset`` (its :class:`~shardwise.loader.state.
LoaderState` extends :class:`Passes`) and of token streams (``TokenStream`` holds one).

Each new pass over the data is the next epoch, unless ``set_epoch`` or ``load_state_dict``
said otherwise since the slot's previous pass: each worker slot (the training process's
pid, the rank and the worker id) keeps a pass record (the control number and epoch of the
last pass it started) in the topology channel (:mod:`shardwise.loader.channel`), so fresh
(non-persistent) DataLoader workers agree with persistent ones and with the training
process; workers announce the epoch they stream, and a saved state names it.
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


@dataclass(kw_only=True)
class Passes:
    """The epoch and resume point the next pass takes (picklable: it travels to DataLoader
    workers with its dataset).

    Attributes:
        channel: where DataLoader workers report and learn the epoch.
        epoch: the epoch of the current (or next) pass.
        resumes: the resume points of that epoch, if one was loaded.
        control: number of the last epoch/resume published to or taken from workers.
        pinned: a worker's own copy loaded a state, or the loader starting it chose the
            epoch (``ShardwiseLoader``): its next pass is that epoch.
        last_pass: the training process's own pass records, by slot.
        set_at: when ``set_epoch`` or ``load_state_dict`` last ran in this process.
        loaded_blocks: ``[epoch, k]``: a loaded state's epoch was planned with ``k`` head
            windows' blocks (:mod:`~shardwise.loader.window_layout`), if not the dataset's.
        advanced: the ``control`` of the last epoch a loader set by its own count of its
            passes, not its user (a ``ShardwiseLoader``, an accelerate wrapper).
    """

    channel: TopologyChannel = field(default_factory=TopologyChannel.new)
    epoch: int = 0
    resumes: list[Resume] = field(default_factory=list)
    control: int = 0
    pinned: bool = False
    last_pass: dict[str, dict[str, int]] = field(default_factory=dict)
    set_at: float = 0.0
    loaded_blocks: list[int] | None = None
    advanced: int = -1

    def publish(self) -> None:
        """Tell DataLoader workers that keep their dataset (``persistent_workers=True``)
        the epoch and resume point set in the training process."""
        if in_dataloader_worker():
            return
        self.set_at = time.time()
        self.control += 1
        resumes = [r.to_dict() for r in self.resumes]
        control = {"n": self.control, "epoch": self.epoch, "resumes": resumes}
        self.channel.publish(control | {"blocks": self.loaded_blocks})

    def begin_pass(self, rank: int, worker_id: int) -> bool:
        """Start a pass of (data-parallel) ``rank``'s worker ``worker_id``: the epoch set by
        ``set_epoch`` or ``load_state_dict`` if this is the slot's first pass since, else
        the epoch after the slot's previous pass. Whether it moved on to that next epoch."""
        worker = in_dataloader_worker()
        if worker:
            self.follow()
            slot = f"{os.getppid()}.{rank}.{worker_id}"
            last = self.channel.last_pass(slot)
        else:
            slot = f"{rank}.{worker_id}"
            last = self.last_pass.get(slot)
        moved = not self.pinned and last is not None and last["n"] == self.control
        if moved and last is not None:
            self.epoch, self.resumes = last["epoch"] + 1, []  # the next epoch, from its start
        self.pinned = False
        if worker:
            self.channel.record_pass(slot, self.control, self.epoch)
        else:
            self.last_pass[slot] = {"n": self.control, "epoch": self.epoch}
        return moved

    def follow(self) -> bool:
        """In a DataLoader worker: take what the training process set since this copy was
        made. Whether that changed the epoch."""
        control: dict[str, Any] | None = self.channel.control()
        if control is None or int(control["n"]) <= self.control:
            return False
        changed = int(control["epoch"]) != self.epoch
        self.control = int(control["n"])
        self.epoch = int(control["epoch"])
        self.resumes = [Resume.from_dict(r) for r in control["resumes"]]
        self.loaded_blocks = control.get("blocks")
        return changed

    def latest_epoch(self, own: Seen | None) -> int:
        """The epoch the latest pass streamed: this process's own (``own``) or the one
        DataLoader workers reported, whichever began later (and after the last set), taken
        on without the resume point of another epoch."""
        seen = [s for s in (own, self.channel.read()) if s is not None]
        if seen:
            latest = max(seen, key=lambda s: s.at)
            if latest.at > self.set_at and latest.epoch not in (None, self.epoch):
                self.epoch, self.resumes = int(latest.epoch), []
        return self.epoch
