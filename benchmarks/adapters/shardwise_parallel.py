"""shardwise's ``parallel_map`` on each backend, with the engine started and stopped here.

Each is a context manager yielding ``map(fn, items, **kw) -> list``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

from adapters.mp_joblib import MapFn, stop_loky

__all__ = ["sw_dask", "sw_plain", "sw_ray", "sw_spark"]


def _mapper(backend: Any) -> MapFn:
    from shardwise.parallel import parallel_map

    def run(fn: Callable[[int], int], items: list[int], **kw: Any) -> list[Any]:
        return parallel_map(fn, items, backend=backend, progress=False, **kw)

    return run


@contextlib.contextmanager
def sw_plain(name: str, cores: int) -> Iterator[MapFn]:
    """The ``local``, ``thread`` and ``joblib`` backends."""
    from shardwise.parallel import get_backend

    backend = get_backend(name, cores)
    try:
        yield _mapper(backend)
    finally:
        backend.close()
        if name == "joblib":
            stop_loky()


@contextlib.contextmanager
def sw_ray(cores: int) -> Iterator[MapFn]:
    """``ray.init(num_cpus=cores)`` on 127.0.0.1, then the ``ray`` backend."""
    import ray

    from shardwise.parallel import get_backend

    tmp = tempfile.mkdtemp(prefix="swbr", dir="/tmp")
    backend = None
    try:
        ray.init(
            num_cpus=cores,
            include_dashboard=False,
            _temp_dir=tmp,
            _node_ip_address="127.0.0.1",
            log_to_driver=False,
        )
        backend = get_backend("ray")
        yield _mapper(backend)
    finally:
        if backend is not None:
            backend.close()
        with contextlib.suppress(Exception):
            ray.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def sw_spark(cores: int) -> Iterator[MapFn]:
    """A ``local[cores]`` SparkSession bound to 127.0.0.1, then the ``spark`` backend."""
    from pyspark.sql import SparkSession

    from shardwise.parallel import get_backend

    spark = backend = None
    try:
        spark = (
            SparkSession.builder.master(f"local[{cores}]")
            .appName("shardwise-bench")
            .config("spark.driver.host", "127.0.0.1")
            .config("spark.driver.bindAddress", "127.0.0.1")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        backend = get_backend("spark", spark=spark)
        yield _mapper(backend)
    finally:
        if backend is not None:
            backend.close()
        if spark is not None:
            with contextlib.suppress(Exception):
                spark.stop()


@contextlib.contextmanager
def sw_dask(cores: int) -> Iterator[MapFn]:
    """A Dask ``LocalCluster`` of single-threaded worker processes on 127.0.0.1."""
    from distributed import Client, LocalCluster

    from shardwise.parallel import get_backend

    cluster = client = backend = None
    try:
        cluster = LocalCluster(
            n_workers=cores,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
        )
        client = Client(cluster)
        backend = get_backend("dask", client=client)
        yield _mapper(backend)
    finally:
        if backend is not None:
            backend.close()
        for obj in (client, cluster):
            if obj is not None:
                with contextlib.suppress(Exception):
                    obj.close()
