"""``.npy`` headers parsed one thread at a time.

numpy parses an ``.npy`` header with ``ast.literal_eval``. CPython 3.11 keeps one count of
the AST conversion's depth per interpreter, so two threads parsing at once can fail with
``SystemError: AST constructor recursion depth mismatch`` (python/cpython#106905): a
pipeline run on the thread backend failed so, reading its tasks' keep masks. Every
``.npy`` read of the pipeline (a stage's keep mask, a dedup task's arrays, a mapped
``.npz`` member's header) holds :data:`HEADERS` while numpy parses.
"""

from __future__ import annotations

import io
import threading

import numpy as np

__all__ = ["HEADERS", "load_npy"]

HEADERS = threading.Lock()


def load_npy(data: bytes) -> np.ndarray:
    """The array of the ``.npy`` image ``data``."""
    with HEADERS:
        return np.asarray(np.load(io.BytesIO(data)))
