"""The class ``StreamingDataset`` stands on besides its own base: torch's
``IterableDataset`` when torch is installed (so ``DataLoader``, Accelerate and Lightning
recognise it), else a plain stand-in. Chosen once, when this module is imported (the
first use of ``shardwise.StreamingDataset``); ``import shardwise`` does not import it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["IterableBase"]


class NoTorchBase:
    """The stand-in base of ``StreamingDataset`` where torch is not installed."""


def _base() -> type:
    try:
        from torch.utils.data import IterableDataset
    except ImportError:
        return NoTorchBase
    return IterableDataset


IterableBase: Any = _base()
