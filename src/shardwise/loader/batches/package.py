"""The one packaging of converted columns into a batch format, for both paths.

A column converted to numpy (of a piece, or of a batch) becomes a :class:`NumpyColumn`
view for ``"numpy"`` batches; for ``"torch"`` batches its numbers become a tensor sharing
its memory (pinned on request), and anything else stays numpy until each batch is cut,
where :func:`~shardwise.loader.batches.convert.torch_other` gives it its torch form.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardwise._optional import require
from shardwise.loader.batches.numpy_column import NumpyColumn

__all__ = ["package"]


def package(values: np.ndarray, fmt: str, pin: bool = False) -> Any:
    """``values`` in batch format ``fmt``: a :class:`NumpyColumn` view, a tensor of the
    same memory (numbers of a torch batch, pinned with ``pin``), or ``values`` as they are
    (other columns of a torch batch: each batch's slice then passes
    :func:`~shardwise.loader.batches.convert.torch_other`)."""
    if fmt == "numpy":
        return values.view(NumpyColumn)
    if values.dtype.kind not in "biuf":
        return values
    torch = require("torch", 'batch_format="torch"')
    tensor = torch.from_numpy(values)
    return tensor.pin_memory() if pin else tensor
