"""Training ingest: the torch-aware ``StreamingDataset`` built on ``shardwise.plan``.

:meth:`StreamingDataset.iter_shard` yields the samples (or ready batches) of one (rank,
worker) from the epoch's plan. With torch installed the class is also a
``torch.utils.data.IterableDataset``: iterating it inside a ``DataLoader`` detects the
rank from ``torch.distributed`` (or ``RANK`` / ``WORLD_SIZE``) and the worker from
``get_worker_info()``. Per-sample mode (``batch_format=None``) yields dicts; use
``DataLoader(ds, batch_size=<the same batch_size>)``. Batched mode (``"numpy"``,
``"torch"``, ``"arrow"``) yields whole per-rank batches: iterate it directly (the
in-process path) or in ``DataLoader(ds, batch_size=None)`` (the worker path).

The rooms, by the path a batch takes (each sub-package's docstring says what it may
import; ``tests/test_layers.py`` checks it):

- :mod:`~shardwise.loader.read`: units read (projection, filter, node cache, read-ahead,
  several sources as one); imports no other room.
- :mod:`~shardwise.loader.batches`: the one batch builder of both paths (windows, pieces,
  gathers, conversion, packaging); imports ``read``.
- :mod:`~shardwise.loader.inprocess`: batches made on threads of the training process.
- :mod:`~shardwise.loader.workers`: what runs in DataLoader workers and how their batches
  travel (shared-memory ring); ``inprocess`` and ``workers`` import ``batches`` and
  ``read``, never each other.
- :mod:`~shardwise.loader.tokens`: ``TokenStream``, packed fixed-length sequences of token
  shards for language models; imports ``read``, the placement and the channel.

The modules beside them assemble the dataset: :mod:`~shardwise.loader.dataset`, and the
small objects it is made of (placement, planner, state, position, channel, stats; made from
its checked arguments by :mod:`~shardwise.loader.parts`), the user's :class:`Source`
(:mod:`~shardwise.loader.source`) and the argument checks.

Names load lazily: ``StreamingDataset`` imports torch (its base) on first use.

May import: ``shardwise.errors``, ``_optional``, ``storage``, ``formats``, ``parallel``,
``index`` and ``plan`` (see ``docs/layers.toml``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from shardwise.loader.batches.numpy_column import NumpyColumn
    from shardwise.loader.dataset import StreamingDatasetBase
    from shardwise.loader.iterable import StreamingDataset
    from shardwise.loader.source import Source

__all__ = ["NumpyColumn", "Source", "StreamingDataset", "StreamingDatasetBase"]

_HOMES = {
    "NumpyColumn": "shardwise.loader.batches.numpy_column",
    "Source": "shardwise.loader.source",
    "StreamingDataset": "shardwise.loader.iterable",
    "StreamingDatasetBase": "shardwise.loader.dataset",
}


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(import_module(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
