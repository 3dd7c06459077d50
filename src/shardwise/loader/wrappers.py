"""Refuse framework wrappers that re-shard the dataset's stream a second time.

HF Accelerate (and so HF ``Trainer``, which prepares its dataloader with it) treats every
``IterableDataset`` as unsharded: with ``dispatch_batches`` (its default for iterable
datasets) rank 0 alone iterates and splits its batches among the ranks; without it,
``IterableDatasetShard`` keeps every ``world_size``-th batch of each rank's stream. Either
way shardwise's own split by rank would be applied twice and part of every epoch lost,
silently. Both wrappers call the dataset's ``set_epoch`` from their ``__iter__`` in the
training process before the first batch; :func:`check_not_resharded` looks at the callers
there and raises, naming the wrapper and the fix.

This reads the callers' classes (``accelerate.data_loader.DataLoaderDispatcher``,
``DataLoaderShard`` and ``IterableDatasetShard``, as named in accelerate 1.x; tested with
the version pinned in constraints.txt). A wrapper over a single process is exact and allowed.
"""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

from shardwise.errors import ConfigError

__all__ = ["check_not_resharded"]

_RESHARDING = ("DataLoaderDispatcher", "IterableDatasetShard")
_FIX = (
    "shardwise already gives every rank its own exact share. With HF Trainer use "
    "shardwise.integrations.hf.ShardwiseTrainer (a Trainer that keeps the dataset's split "
    "and resumes it from its checkpoints); with Accelerate prepare a "
    "shardwise.integrations.hf.ShardwiseLoader (accelerator.prepare leaves it as it is), or "
    "prepare only the model and optimizer and iterate the DataLoader yourself"
)


def _resharding_caller(depth: int = 8) -> Any:
    """The accelerate wrapper among the callers of the caller's caller, if any."""
    frame: FrameType | None = sys._getframe(2)
    for _ in range(depth):
        if frame is None:
            return None
        obj = frame.f_locals.get("self")
        cls = type(obj)  # accelerate's adapters report their base DataLoader as __class__
        if cls.__module__.startswith("accelerate.") and cls.__name__ in _RESHARDING:
            return obj
        inner = getattr(obj, "dataset", None)
        if cls.__module__.startswith("accelerate.") and isinstance(inner, _iterable_shard()):
            return inner
        frame = frame.f_back
    return None


def _iterable_shard() -> tuple[type, ...]:
    module = sys.modules.get("accelerate.data_loader")
    shard = getattr(module, "IterableDatasetShard", None)
    return (shard,) if isinstance(shard, type) else ()


def _processes(wrapper: Any) -> int:
    state = getattr(wrapper, "state", None)
    n = getattr(wrapper, "num_processes", None) or getattr(state, "num_processes", None)
    return int(n or 1)


def check_not_resharded() -> None:
    """Raise if the caller of the dataset's ``set_epoch`` is a wrapper that re-shards it.

    Raises:
        ConfigError: naming the wrapper and the fix.
    """
    if "accelerate" not in sys.modules:
        return
    wrapper = _resharding_caller()
    if wrapper is None or _processes(wrapper) <= 1:
        return
    name = f"{type(wrapper).__module__}.{type(wrapper).__name__}"
    how = (
        "rank 0 alone would iterate and split its own share among the ranks"
        if type(wrapper).__name__ == "DataLoaderDispatcher"
        else "each rank would keep every world_size-th batch of its own share"
    )
    raise ConfigError(
        f"a StreamingDataset is wrapped by {name} over {_processes(wrapper)} processes, which "
        f"re-shards it: {how}, and part of every epoch would be lost. {_FIX}."
    )
