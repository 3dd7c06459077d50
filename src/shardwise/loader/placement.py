"""Detect where this process sits: (rank, world size) and (worker id, workers).

Explicit arguments always win. Otherwise the rank comes from an initialised
``torch.distributed`` process group, then from the ``RANK``/``WORLD_SIZE``
environment variables (set by torchrun and most launchers), else rank 0 of 1.
The worker comes from ``torch.utils.data.get_worker_info()`` inside a DataLoader
worker, else worker 0 of 1. torch is only consulted if it is already imported.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError
from shardwise.loader._args import check_int, check_ranks
from shardwise.loader.groups import data_parallel

__all__ = ["Placement", "Ranks", "detect_placement", "in_dataloader_worker", "place_ranks"]


@dataclass(frozen=True)
class Placement:
    """One (rank, worker) position in the training topology.

    Attributes:
        rank: global rank, ``0 <= rank < world_size``.
        world_size: number of ranks.
        worker_id: dataloader worker of this rank, ``0 <= worker_id < num_workers``.
        num_workers: dataloader workers per rank (1 when loading in-process).
    """

    rank: int
    world_size: int
    worker_id: int
    num_workers: int

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"need 0 <= rank < world_size, got rank={self.rank}, world_size={self.world_size}"
            )
        if self.num_workers < 1 or not 0 <= self.worker_id < self.num_workers:
            raise ConfigError(
                "need 0 <= worker_id < num_workers, got "
                f"worker_id={self.worker_id}, num_workers={self.num_workers}"
            )


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return None
    try:
        return int(value)
    except ValueError as exc:
        raise ConfigError(f"environment variable {name}={value!r} is not an integer") from exc


def _found_rank() -> tuple[int, int] | None:
    """(rank, world size) from ``torch.distributed`` or the environment, if either tells."""
    torch = sys.modules.get("torch")
    if torch is not None:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    rank, world = _env_int("RANK"), _env_int("WORLD_SIZE")
    if world is not None:
        return (rank or 0), world
    return None


def _detect_rank() -> tuple[int, int]:
    return _found_rank() or (0, 1)


def _detect_worker() -> tuple[int, int]:
    torch = sys.modules.get("torch")
    if torch is not None:
        info = torch.utils.data.get_worker_info()
        if info is not None:
            return info.id, info.num_workers
    return 0, 1


def detect_placement(
    rank: int | None = None,
    world_size: int | None = None,
    worker_id: int | None = None,
    num_workers: int | None = None,
) -> Placement:
    """Return the placement, detecting whatever was not given explicitly."""
    d_rank, d_world = _detect_rank()
    d_worker, d_workers = _detect_worker()
    world = world_size if world_size is not None else d_world
    rk = rank if rank is not None else d_rank
    workers = num_workers if num_workers is not None else d_workers
    wid = worker_id if worker_id is not None else d_worker
    return Placement(rk, world, wid, workers)


def in_dataloader_worker() -> bool:
    """Whether this code runs in a torch DataLoader worker: never where torch is not
    imported (a worker's loop is torch's own code), so a process without it, such as a
    DALI source's worker, does not pay torch's import to find out."""
    data = sys.modules.get("torch.utils.data")
    return data is not None and data.get_worker_info() is not None


@dataclass(frozen=True)
class Ranks:
    """Where a dataset streams to: its training rank, the data-parallel rank its plan
    is cut for, and the DataLoader workers if given.

    Attributes:
        rank, world_size: the training rank and world size (given or detected).
        dp_rank, dp_size: the data-parallel rank and size (see
            :mod:`shardwise.loader.groups`).
        num_workers: the DataLoader's workers (at least 1) if given, else None.
        detected: ``rank`` and ``world_size`` were detected, not given.
    """

    rank: int
    world_size: int
    dp_rank: int
    dp_size: int
    num_workers: int | None
    detected: bool = False

    def check_now(self) -> None:
        """Detected ranks are still this process's (a dataset made before the process
        group started, or in Ray Train's driver, would stream as the wrong rank). A
        DataLoader worker checks what it inherited: the process group of a forked one, a
        launcher's ``RANK``/``WORLD_SIZE`` (Ray Train sets them too); a spawned one
        without them has nothing to check against.

        Raises:
            ConfigError: this process is now another rank, or of another world size.
        """
        if not self.detected:
            return
        now = _found_rank() if in_dataloader_worker() else _detect_rank()
        if now is not None and now != (self.rank, self.world_size):
            raise ConfigError(
                f"this StreamingDataset was made when this process was rank {self.rank} of "
                f"{self.world_size}, and it is now rank {now[0]} of {now[1]} (was it made "
                "before the process group started?): make it after (under Lightning, in "
                "train_dataloader), or give rank= and world_size="
            )


def place_ranks(
    rank: int | None, world_size: int | None, num_workers: int | None, groups: dict[str, Any]
) -> Ranks:
    """The :class:`Ranks` of a dataset from its arguments (``groups``: ``replication``,
    ``dp_rank``/``dp_size`` or ``device_mesh``/``dp_dim``)."""
    rank, world_size = check_ranks(rank, world_size)
    placement = detect_placement(rank, world_size, 0, 1)
    dp = data_parallel(placement.rank, placement.world_size, **groups)
    workers = check_int("num_workers", num_workers, 0, optional=True)
    workers = max(1, workers) if workers is not None else None
    detected = rank is None and world_size is None
    return Ranks(placement.rank, placement.world_size, dp.rank, dp.size, workers, detected)
