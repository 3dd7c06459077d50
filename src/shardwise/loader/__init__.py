"""Training ingest: the torch-aware ``StreamingDataset`` built on ``shardwise.plan``.

``StreamingDataset`` is created on first access: with torch installed it is also a
``torch.utils.data.IterableDataset``; without torch it is the plain class.
"""

from __future__ import annotations

from typing import Any

from shardwise.loader.dataset import NumpyColumn, StreamingDatasetBase
from shardwise.loader.sources import Source

__all__ = ["NumpyColumn", "Source", "StreamingDataset", "StreamingDatasetBase"]

_cls: type | None = None


def _build() -> type:
    global _cls
    if _cls is None:
        try:
            from torch.utils.data import IterableDataset
        except ImportError:
            _cls = type(
                "StreamingDataset",
                (StreamingDatasetBase,),
                {"__module__": __name__, "__doc__": StreamingDatasetBase.__doc__},
            )
        else:
            _cls = type(
                "StreamingDataset",
                (StreamingDatasetBase, IterableDataset),
                {
                    "__module__": __name__,
                    "__doc__": StreamingDatasetBase.__doc__,
                    "__iter__": StreamingDatasetBase.__iter__,
                    "__len__": StreamingDatasetBase.__len__,
                },
            )
    return _cls


def __getattr__(name: str) -> Any:
    if name == "StreamingDataset":
        return _build()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
