"""Map the training topology onto the data-parallel one before anything is planned.

Ranks of one model-parallel group (tensor or pipeline parallel) must read identical
batches; only data-parallel ranks differ. The loader plans over the data-parallel
ranks alone, so every contract of the plan (equal steps, no repeats, determinism, exact
and elastic resume, mixing, ``canonical_workers``) holds between groups unchanged.

Three ways to say where this process sits, exclusive of each other:

- ``replication=R``: consecutive groups of ``R`` ranks are one data-parallel rank
  (``dp_rank = rank // R``, ``dp_size = world_size // R``);
- ``dp_rank=``/``dp_size=`` given explicitly, for any other layout;
- ``device_mesh=`` (a ``torch.distributed.device_mesh.DeviceMesh``) with ``dp_dim=``,
  the name (or index) of its data-parallel dimension.

With none of them every rank is its own data-parallel rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from shardwise.errors import ConfigError
from shardwise.loader._args import check_int

__all__ = ["DataParallel", "data_parallel"]


@dataclass(frozen=True)
class DataParallel:
    """Where a rank sits among the data-parallel ranks.

    Attributes:
        rank: data-parallel rank, ``0 <= rank < size``; ranks of a group share it.
        size: number of data-parallel ranks (groups reading different data).
    """

    rank: int
    size: int


def data_parallel(
    rank: int,
    world_size: int,
    *,
    replication: int | None = None,
    dp_rank: int | None = None,
    dp_size: int | None = None,
    device_mesh: Any = None,
    dp_dim: str | int | None = None,
) -> DataParallel:
    """The data-parallel position of training rank ``rank`` of ``world_size``.

    Raises:
        ConfigError: arguments that contradict each other or the world size.
    """
    given = [
        name
        for name, on in (
            ("replication=", replication is not None),
            ("dp_rank=/dp_size=", dp_rank is not None or dp_size is not None),
            ("device_mesh=", device_mesh is not None),
        )
        if on
    ]
    if len(given) > 1:
        raise ConfigError(
            "give only one of replication=, dp_rank=/dp_size= and device_mesh=; "
            f"got {' and '.join(given)}"
        )
    if dp_dim is not None and device_mesh is None:
        raise ConfigError(
            f"dp_dim={dp_dim!r} names a dimension of device_mesh=; pass device_mesh= too"
        )
    if device_mesh is not None:
        return _from_mesh(device_mesh, dp_dim)
    if dp_rank is not None or dp_size is not None:
        return _explicit(dp_rank, dp_size)
    r = check_int("replication", 1 if replication is None else replication, 1)
    if world_size % r:
        raise ConfigError(
            f"replication={r} must divide the world size: {world_size} ranks cannot form "
            f"groups of {r} (rank {rank})"
        )
    return DataParallel(rank // r, world_size // r)


def _explicit(dp_rank: int | None, dp_size: int | None) -> DataParallel:
    if dp_rank is None or dp_size is None:
        missing = "dp_size=" if dp_size is None else "dp_rank="
        raise ConfigError(f"dp_rank= and dp_size= go together; {missing} is missing")
    size = check_int("dp_size", dp_size, 1)
    rk = check_int("dp_rank", dp_rank, 0)
    if rk >= size:
        raise ConfigError(f"need 0 <= dp_rank < dp_size, got dp_rank={rk}, dp_size={size}")
    return DataParallel(rk, size)


def _from_mesh(mesh: Any, dp_dim: str | int | None) -> DataParallel:
    """Rank and size along the mesh's data-parallel dimension (by name or index)."""
    ndim = getattr(mesh, "ndim", None)
    if not isinstance(ndim, int) or not hasattr(mesh, "get_local_rank"):
        raise ConfigError(f"device_mesh= must be a torch DeviceMesh, got {type(mesh).__name__}")
    names = list(getattr(mesh, "mesh_dim_names", None) or [])
    if dp_dim is None:
        if ndim != 1:
            raise ConfigError(
                f"device_mesh= has {ndim} dimensions {tuple(names) or ''}; pass dp_dim= naming "
                "the data-parallel one"
            )
        dim = 0
    elif isinstance(dp_dim, str):
        if dp_dim not in names:
            raise ConfigError(
                f"dp_dim={dp_dim!r} is not a dimension of device_mesh= (its dimensions: {names})"
            )
        dim = names.index(dp_dim)
    elif isinstance(dp_dim, int) and not isinstance(dp_dim, bool) and 0 <= dp_dim < ndim:
        dim = dp_dim
    else:
        raise ConfigError(
            "dp_dim must name a dimension of device_mesh= "
            f"({names or list(range(ndim))}), got {dp_dim!r}"
        )
    return DataParallel(int(mesh.get_local_rank(dim)), int(mesh.size(dim)))
