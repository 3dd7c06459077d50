"""Shared test setup: environment, and the real engines started once per session on
127.0.0.1 (Ray, Spark, Dask). Each fixture stops what it started."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

TESTS = os.path.dirname(os.path.abspath(__file__))
# helper modules and scripts shared by tests (tests/support/) are importable everywhere
SUPPORT = os.path.join(TESTS, "support")
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TQDM_MININTERVAL", "5")
# Dask's idle processes sampled their stacks every 10 ms and ticked every 20 ms: 16% of a
# core for a LocalCluster of two workers that waits between tests, 4% with these
os.environ.setdefault("DASK_DISTRIBUTED__WORKER__PROFILE__ENABLED", "False")
os.environ.setdefault("DASK_DISTRIBUTED__ADMIN__TICK__INTERVAL", "1s")
os.environ.setdefault("DASK_DISTRIBUTED__ADMIN__SYSTEM_MONITOR__INTERVAL", "2s")
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
os.environ["PYSPARK_PYTHON"] = sys.executable
os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
# worker processes of every engine import task helpers from tests/
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (SUPPORT, os.environ.get("PYTHONPATH", "")) if p
)
if SUPPORT not in sys.path:
    sys.path.insert(0, SUPPORT)
# under pytest-xdist (`make test` runs two workers), the Ray instances a worker's tests
# start with Ray's default temp dir (scripts that call ray.init() as users do) are its own:
# Ray finds a running instance through a file in that dir and would join the other's
_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")
if _XDIST_WORKER and "RAY_TMPDIR" not in os.environ:
    os.environ["RAY_TMPDIR"] = tempfile.mkdtemp(prefix=f"swray-{_XDIST_WORKER}-", dir="/tmp")

from _engines import BACKENDS, PROCESS_BACKENDS, make_backend  # noqa: E402
from _s3server import bucket, s3_server  # noqa: E402,F401  (one S3 server per session)


@pytest.fixture(scope="session")
def ray_engine() -> Iterator[Any]:
    import ray

    tmp = tempfile.mkdtemp(prefix="swray", dir="/tmp")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        _temp_dir=tmp,
        _node_ip_address="127.0.0.1",
        log_to_driver=False,
    )
    yield ray
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture(scope="session")
def spark_engine() -> Iterator[Any]:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("shardwise-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    yield spark
    spark.stop()


@pytest.fixture(scope="session")
def dask_engine() -> Iterator[Any]:
    from distributed import Client, LocalCluster

    cluster = LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    )
    client = Client(cluster)
    yield client
    client.close()
    cluster.close()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    b = make_backend(request.param, request)
    yield b
    b.close()


@pytest.fixture(params=PROCESS_BACKENDS)
def process_backend(request: pytest.FixtureRequest) -> Iterator[Any]:
    b = make_backend(request.param, request)
    yield b
    b.close()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The worker's Ray temp dir goes with it (its instances were stopped by their tests)."""
    if _XDIST_WORKER and os.environ.get("RAY_TMPDIR", "").startswith("/tmp/swray-"):
        shutil.rmtree(os.environ["RAY_TMPDIR"], ignore_errors=True)
