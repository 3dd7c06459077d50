"""How the training process learns the topology that consumed its batches.

``ds.state_dict(consumed_batches=...)`` runs in the training process, but the number of
DataLoader workers is only known inside the workers (``get_worker_info()``). Each
dataset owns a small file named by a random id (in ``/dev/shm`` where it exists); a
worker that starts iterating writes ``(world_size, num_workers)`` into it, and
``state_dict`` reads it back. Iterating in the training process itself (no workers,
``iter_shard``) is recorded on the object. The most recent of the two describes the
batches consumed; when neither exists, the position cannot be known and ``state_dict``
says so instead of guessing.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import uuid
from dataclasses import dataclass

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
        root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else tempfile.gettempdir()
        return cls(os.path.join(root, f"shardwise-topology-{uuid.uuid4().hex}.json"))

    def announce(self, world_size: int, num_workers: int) -> None:
        """Record the topology of the workers iterating now (atomic; last writer wins)."""
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w") as f:
                json.dump({"world_size": world_size, "num_workers": num_workers, "at": time.time()}, f)
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

    def remove(self) -> None:
        try:
            os.unlink(self.path)
        except OSError:
            pass
