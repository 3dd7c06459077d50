"""How the training process learns the topology that consumed its batches.

``ds.state_dict(consumed_batches=...)`` runs in the training process, but the number of
DataLoader workers is only known inside the workers (``get_worker_info()``). Each
dataset owns a small file named by its creating process and a random id (in ``/dev/shm``
where it exists; :mod:`~shardwise.loader.channel_sweep` removes those of killed processes); a
worker that starts iterating writes ``(world_size, num_workers)`` into it, and
``state_dict`` reads it back. Iterating in the training process itself (no workers,
``iter_shard``) is recorded on the object. The most recent of the two describes the
batches consumed; when neither exists, the position cannot be known and ``state_dict``
says so instead of guessing.

The other way, ``set_epoch`` and ``load_state_dict`` in the training process write the
epoch and resume point into a second file (numbered, the number also kept on the object);
a worker that starts an iteration takes them from there when the number is newer than
its own copy's. Without it, ``persistent_workers=True`` workers (which keep the dataset
they were started with) would stream epoch 0's order in every epoch.

Epochs advance by themselves: each worker slot (the training process's pid and the worker
id) keeps a pass record, the control number and epoch of the last pass it started. A pass
that starts under the same control number as the slot's record is the next epoch; the first
pass after ``set_epoch`` or ``load_state_dict`` is the epoch they set. Fresh (non-persistent)
workers read the record their predecessor in the slot wrote, so they agree with persistent
ones. Workers announce the epoch they stream, so ``state_dict`` in the training process
describes the epoch actually consumed.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from shardwise.errors import PlanError
from shardwise.loader.channel_sweep import channel_name, sweep_once

__all__ = ["NO_CONSUMER", "Seen", "TopologyChannel", "consumer"]

#: a state asked of a dataset no topology iterated, and whose workers are not given
NO_CONSUMER = (
    "state_dict cannot tell how many DataLoader workers consumed these batches: this "
    "{name} was not iterated in this process and no worker reported; pass num_workers= "
    "(the DataLoader's, 1 for num_workers=0) to {name}"
)


@dataclass(frozen=True)
class Seen:
    """A topology that iterated the dataset, and when (seconds since the epoch)."""

    world_size: int
    num_workers: int
    at: float
    epoch: int | None = None  # the epoch that pass streamed (None: not reported)
    hosted: bool = False  # served to an accelerate wrapper (see .hosted)


def consumer(
    seen: tuple[Seen | None, ...],
    given: Callable[[], tuple[int, int | None]],
    consumed: int,
    name: str,
) -> tuple[int, int]:
    """(world_size, num_workers) of whatever iterated a dataset most recently: a DataLoader's
    workers (through the channel) or this process itself (``seen``). Before any iteration:
    ``given()`` (the ranks and the given workers), if the workers were given or no batch
    was consumed yet (a state at step 0).

    Raises:
        PlanError: nothing iterated the dataset here and its workers were not given.
    """
    found = [s for s in seen if s is not None]
    if found:
        last = max(found, key=lambda s: s.at)
        return last.world_size, last.num_workers
    world_size, workers = given()
    if consumed == 0 or workers is not None:
        return world_size, workers or 1
    raise PlanError(NO_CONSUMER.format(name=name))


@dataclass(frozen=True)
class TopologyChannel:
    """The file shared by one dataset object and its DataLoader workers."""

    path: str

    @classmethod
    def new(cls) -> TopologyChannel:
        """A channel owned by this process (its name says so, see
        :mod:`~shardwise.loader.channel_sweep`); the first in a process first removes the
        channels that killed processes left behind."""
        root = _root()
        sweep_once(root)
        return cls(os.path.join(root, channel_name(uuid.uuid4().hex)))

    def announce(
        self, world_size: int, num_workers: int, epoch: int | None = None, hosted: bool = False
    ) -> None:
        """Record the topology (and epoch) of the workers iterating now, and whether they
        serve an accelerate wrapper (atomic; last writer wins)."""
        seen = {"world_size": world_size, "num_workers": num_workers, "at": time.time()}
        seen |= {"hosted": hosted} if epoch is None else {"epoch": epoch, "hosted": hosted}
        _write(self.path, seen)

    def read(self) -> Seen | None:
        try:
            with open(self.path) as f:
                d = json.load(f)
            epoch = None if d.get("epoch") is None else int(d["epoch"])
            hosted = bool(d.get("hosted", False))
            return Seen(int(d["world_size"]), int(d["num_workers"]), float(d["at"]), epoch, hosted)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None

    def last_pass(self, slot: str) -> dict[str, int] | None:
        """The pass record of ``slot``: ``{"n": control number, "epoch": epoch}``, if any."""
        try:
            with open(f"{self.path}.pass.{slot}") as f:
                d = json.load(f)
            return {"n": int(d["n"]), "epoch": int(d["epoch"])}
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def record_pass(self, slot: str, n: int, epoch: int) -> None:
        """Record that ``slot`` started a pass of ``epoch`` under control number ``n``."""
        _write(f"{self.path}.pass.{slot}", {"n": n, "epoch": epoch})

    def publish(self, control: dict[str, Any]) -> None:
        """Write the training process's epoch and resume point for its workers."""
        tmp = f"{self.path}.control.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(control, f)
            os.replace(tmp, f"{self.path}.control")
        except OSError:
            pass  # workers keep the dataset they were started with

    def control(self) -> dict[str, Any] | None:
        """What :meth:`publish` wrote last, if anything."""
        try:
            with open(f"{self.path}.control") as f:
                d = json.load(f)
            return d if isinstance(d, dict) else None
        except (OSError, ValueError):
            return None

    def remove(self) -> None:
        for path in (self.path, f"{self.path}.control", *glob.glob(f"{self.path}.pass.*")):
            try:
                os.unlink(path)
            except OSError:
                pass


def _root() -> str:
    """Where channels live: ``/dev/shm`` where it exists, else the temp directory."""
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def _write(path: str, record: dict[str, Any]) -> None:
    """Write ``record`` as JSON to ``path`` atomically (nothing without writable space)."""
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(record, f)
        os.replace(tmp, path)
    except OSError:
        pass  # no writable temp space: state_dict will say it cannot tell
