"""The parallel benchmark's peers: ``multiprocessing.Pool.map`` and ``joblib.Parallel``.

Each is a context manager yielding ``map(fn, items) -> list``.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["MapFn", "joblib_parallel", "pool_map", "stop_loky"]

MapFn = Callable[..., list[Any]]


@contextlib.contextmanager
def pool_map(cores: int) -> Iterator[MapFn]:
    """``multiprocessing.Pool(cores).map``."""
    pool = mp.Pool(cores)
    try:
        yield pool.map
    finally:
        pool.close()
        pool.join()


@contextlib.contextmanager
def joblib_parallel(cores: int) -> Iterator[MapFn]:
    """``joblib.Parallel(n_jobs=cores)(delayed(fn)(x) for x in items)``."""
    from joblib import Parallel, delayed

    try:
        yield lambda fn, items: Parallel(n_jobs=cores)(delayed(fn)(x) for x in items)
    finally:
        stop_loky()


def stop_loky() -> None:
    """Stop loky's reusable worker pool, which otherwise idles on for minutes."""
    with contextlib.suppress(Exception):
        from joblib.externals.loky import get_reusable_executor

        get_reusable_executor().shutdown(wait=True, kill_workers=True)
