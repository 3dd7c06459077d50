"""How many units a worker mixes at once when the user does not say (pure numpy)."""

from __future__ import annotations

import numpy as np

__all__ = ["DEFAULT_SHUFFLE_BYTES", "MAX_AUTO_INTERLEAVE", "auto_interleave"]

DEFAULT_SHUFFLE_BYTES = 512 * 2**20  # per worker
MAX_AUTO_INTERLEAVE = 64  # units mixed at once by default, whatever the memory budget


def auto_interleave(unit_bytes: np.ndarray, shuffle_bytes: int = DEFAULT_SHUFFLE_BYTES) -> int:
    """As many units as fit ``shuffle_bytes`` once decoded (taken as twice their mean
    stored size), between 1 and :data:`MAX_AUTO_INTERLEAVE`.

    Args:
        unit_bytes: the stored size of every unit of the dataset.
        shuffle_bytes: the memory a worker may spend on the units it mixes.
    """
    sizes = np.asarray(unit_bytes, dtype=np.float64)
    if sizes.size == 0:
        return 1
    decoded = 2.0 * float(sizes.mean())
    return int(min(MAX_AUTO_INTERLEAVE, max(1, shuffle_bytes // max(decoded, 1.0))))
