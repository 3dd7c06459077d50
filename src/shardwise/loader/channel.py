"""How the training process learns the topology that consumed its batches.

``ds.state_dict(consumed_batches=...)`` runs in the training process, but the number of
DataLoader workers is only known inside the workers (``get_worker_info()``). Each
dataset owns a small file named by a random id (in ``/dev/shm`` where it exists); a
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
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

__all__ = ["Seen", "TopologyChannel"]


@dataclass(frozen=True)
class Seen:
    """A topology that iterated the dataset, and when (seconds since the epoch)."""

    world_size: int
    num_workers: int
    at: float


@dataclass(frozen=True)
class TopologyChannel:
    """The file shared by one dataset object and its DataLoader workers."""

    path: str

    @classmethod
    def new(cls) -> TopologyChannel:
        root = (
            "/dev/shm"
            if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)
            else tempfile.gettempdir()
        )
        return cls(os.path.join(root, f"shardwise-topology-{uuid.uuid4().hex}.json"))

    def announce(self, world_size: int, num_workers: int) -> None:
        """Record the topology of the workers iterating now (atomic; last writer wins)."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump(
                    {"world_size": world_size, "num_workers": num_workers, "at": time.time()}, f
                )
            os.replace(tmp, self.path)
        except OSError:
            pass  # no writable temp space: state_dict will say it cannot tell

    def read(self) -> Seen | None:
        try:
            with open(self.path) as f:
                d = json.load(f)
            return Seen(int(d["world_size"]), int(d["num_workers"]), float(d["at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

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
        for path in (self.path, f"{self.path}.control"):
            try:
                os.unlink(path)
            except OSError:
                pass
