"""``spark``: one Spark job per chunk, submitted from driver threads.

Pass ``spark=`` (a SparkSession or SparkContext) to use yours, or the active session is
used; otherwise a ``local[n]`` session bound to 127.0.0.1 is started and stopped with the
backend. Jobs of one map call share a job group, so Ctrl-C cancels exactly them.
"""

from __future__ import annotations

import os
import pickle
import shutil
import sys
import uuid
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as futures_wait
from typing import Any

from shardwise._optional import require
from shardwise.errors import ShardwiseError
from shardwise.parallel._counter import CounterServer, run_chunk_counted
from shardwise.parallel._in_worker import by_value
from shardwise.parallel.backend import Backend, Finished, Session, WorkerLost
from shardwise.parallel.cpus import cpu_count

__all__ = ["SparkBackend"]
# how to get a module the driver imports onto the workers
SHIP_HINT = (
    "on Spark, spark.sparkContext.addPyFile(the module's file) or the spark.submit.pyFiles "
    "setting, or install it in the executors' environment"
)


class _SparkSession(Session):
    def __init__(self, sc: Any, fn: Any, retry_on: Any, parallelism: int) -> None:
        self.sc = sc
        # by value, so functions from a script's __main__ or a notebook reach the workers
        self.fn_bc = sc.broadcast(by_value(fn))
        self.retry_on = retry_on
        self.group = f"shardwise-{uuid.uuid4().hex[:12]}"
        self.pool = ThreadPoolExecutor(parallelism, "shardwise-spark")
        self.futures: dict[Future[Any], int] = {}
        # running tasks send their counters to the driver's host, which executors reach
        self.counter = CounterServer(sc.getConf().get("spark.driver.host") or "127.0.0.1")

    def _job(self, chunk: Sequence[tuple[int, Any]]) -> Any:
        self.sc.setJobGroup(self.group, "shardwise parallel_map", interruptOnCancel=True)
        fn_bc, retry_on, address = self.fn_bc, self.retry_on, self.counter.address
        rdd = self.sc.parallelize([list(chunk)], 1)
        return rdd.map(
            lambda ch: run_chunk_counted(pickle.loads(fn_bc.value), ch, retry_on, address)
        ).collect()[0]

    def counters(self) -> int:
        return self.counter.take()

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        self.futures[self.pool.submit(self._job, chunk)] = chunk_id

    def wait(self, timeout: float) -> list[Finished]:
        if not self.futures:
            return []
        done, _ = futures_wait(list(self.futures), timeout, return_when=FIRST_COMPLETED)
        out: list[Finished] = []
        for fut in done:
            cid = self.futures.pop(fut)
            try:
                out.append((cid, fut.result()))
            except Exception as exc:  # noqa: BLE001 - executor or Python worker lost
                out.append((cid, WorkerLost.of(exc, SHIP_HINT)))
        return out

    def close(self, cancel: bool) -> None:
        if cancel:
            self.sc.cancelJobGroup(self.group)
        self.pool.shutdown(wait=True, cancel_futures=True)
        self.counter.close()
        try:
            self.fn_bc.unpersist()
        except Exception:  # noqa: BLE001 - context already stopped
            pass


def _start_session(n: int) -> Any:
    """A ``local[n]`` session on 127.0.0.1; a missing Java runtime is named as such."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(f"local[{n},4]")
        .appName("shardwise")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
    )
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise MissingJavaError("no `java` on PATH and JAVA_HOME is not set")
    try:
        return builder.getOrCreate()
    except Exception as exc:
        if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway process exited" in str(exc):
            raise MissingJavaError(str(exc).splitlines()[0]) from exc
        raise


class MissingJavaError(ShardwiseError, RuntimeError):
    """Spark could not start its Java side."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            f"the spark backend needs a Java runtime (JDK 17) and could not start one ({detail}); "
            "install it (e.g. `apt-get install openjdk-17-jre-headless`, or a JDK 17 from "
            "https://adoptium.net) and put `java` on PATH or set JAVA_HOME"
        )
        self.detail = detail

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.detail,))


class SparkBackend(Backend):
    """Run on Spark. Options: ``spark`` (a SparkSession or SparkContext to use)."""

    name = "spark"

    def __init__(self, n_jobs: int | None = None, **options: Any) -> None:
        super().__init__(n_jobs, **options)
        require("pyspark", "the spark backend")
        given = options.get("spark")
        self._sc: Any = getattr(given, "sparkContext", given)
        self._owned: Any = None

    def context(self) -> Any:
        if self._sc is None:
            from pyspark.sql import SparkSession

            active = SparkSession.getActiveSession()
            if active is not None:
                self._sc = active.sparkContext
            else:
                os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
                os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
                n = self.n_jobs or cpu_count()
                self._owned = _start_session(n)
                self._sc = self._owned.sparkContext
        return self._sc

    def slots(self) -> int:
        total = int(self.context().defaultParallelism)
        return min(total, self.n_jobs) if self.n_jobs else max(1, total)

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _SparkSession(self.context(), fn, retry_on, parallelism)

    def default_chunksize(self, n_items: int | None, parallelism: int) -> int:
        if n_items is None:
            return 64
        return max(1, -(-n_items // (parallelism * 4)))

    def close(self) -> None:
        if self._owned is not None:
            self._owned.stop()
            self._owned = None
            self._sc = None
