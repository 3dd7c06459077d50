"""Task functions for the benchmarks, importable by every engine's worker processes.

They live in their own module (not in a bench script) so that workers started by Ray,
Spark, Dask or loky can import them by name: the bench scripts put ``benchmarks/`` on
``PYTHONPATH`` before starting an engine.
"""

from __future__ import annotations

#: Iterations of the CPU-heavy loop; about 0.1-0.2 s of pure Python on a 2020s core.
HEAVY_ITERS = 600_000


def square(x: int) -> int:
    """A tiny task: the work is negligible, so its time is the framework's overhead."""
    return x * x


def heavy(seed: int) -> int:
    """A CPU-bound task holding the GIL: a linear-congruential hash loop, summed."""
    h = (seed * 2654435761) & 0xFFFFFFFF
    total = 0
    for i in range(HEAVY_ITERS):
        h = (h * 1103515245 + 12345 + i) & 0xFFFFFFFF
        total += h >> 16
    return total
