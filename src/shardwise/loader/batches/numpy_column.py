"""The public :class:`NumpyColumn`: the column type of ``batch_format="numpy"`` batches.

Its own home, so that the batch builder and both paths can make it without importing the
DataLoader-worker transport (which teaches ``multiprocessing`` to send it through shared
memory, see :mod:`shardwise.loader.workers.transport`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["NumpyColumn"]


class NumpyColumn(np.ndarray):
    """A column of a ``batch_format="numpy"`` batch: a plain numpy array, except that a
    PyTorch DataLoader leaves it as it is instead of turning it into a tensor in the
    worker, and that it crosses from a worker to the training process through shared
    memory (see :mod:`shardwise.loader.workers.transport`). ``torch.from_numpy(column)``
    in the training loop is free."""

    _sw_arrow: Any = None  # the Arrow array a string column was made from, if any
