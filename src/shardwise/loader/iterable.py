"""``StreamingDataset``: its own base (:mod:`.dataset`) and torch's ``IterableDataset``
when torch is installed (so ``DataLoader``, Accelerate and Lightning recognise it), else a
plain stand-in. Chosen once, when this module is imported (the first use of
``shardwise.StreamingDataset``); ``import shardwise`` does not import it, nor do the DALI
sources, which need only the base.
"""

from __future__ import annotations

from typing import Any

from shardwise.loader.dataset import StreamingDatasetBase

__all__ = ["IterableBase", "StreamingDataset"]


class NoTorchBase:
    """The stand-in base of ``StreamingDataset`` where torch is not installed."""


def _base() -> type:
    try:
        from torch.utils.data import IterableDataset
    except ImportError:
        return NoTorchBase
    return IterableDataset


IterableBase: Any = _base()


class StreamingDataset(StreamingDatasetBase, IterableBase):
    __doc__ = StreamingDatasetBase.__doc__
