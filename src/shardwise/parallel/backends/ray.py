"""``ray``: one Ray task per chunk on the cluster ``ray.init()`` connected to.

If Ray is not initialised, a local instance is started (options are passed to
``ray.init``) and shut down when the backend closes. Ray's own retries are turned off so
that a lost worker is retried by the shardwise driver, as on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from shardwise._optional import require
from shardwise.parallel._in_worker import run_chunk
from shardwise.parallel.backend import Backend, Finished, Session, WorkerLost

__all__ = ["RayBackend"]
# how to get a module the driver imports onto the workers
SHIP_HINT = (
    "on Ray, pass runtime_env={'py_modules': [the module's file or package directory]} or "
    "{'working_dir': its project directory} to ray.init() or parallel_backend('ray', ...)"
)


def _job(fn: Any, retry_on: Any, chunk: Sequence[tuple[int, Any]], counter: Any) -> Any:
    from shardwise.parallel import _in_worker

    sink = _in_worker.Throttled(counter.add.remote)
    _in_worker.set_reporter(sink)
    try:
        return run_chunk(fn, chunk, retry_on)
    finally:
        sink.flush()
        _in_worker.set_reporter(None)


class _Counter:
    """A tiny actor summing what running tasks pass to ``shardwise.parallel.report``."""

    def __init__(self) -> None:
        self.total = 0

    def add(self, n: int) -> None:
        self.total += n

    def take(self) -> int:
        n, self.total = self.total, 0
        return n


class _RaySession(Session):
    def __init__(self, ray: Any, fn: Any, retry_on: Any) -> None:
        self.ray = ray
        self.remote = ray.remote(num_cpus=1, max_retries=0)(_job)
        self.fn_ref = ray.put(fn)
        self.retry_on = retry_on
        self.refs: dict[Any, int] = {}
        self.counter = self._new_counter()

    def _new_counter(self) -> Any:
        """The counter actor, on the driver's own node: losing a worker node loses no count."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        here = NodeAffinitySchedulingStrategy(
            self.ray.get_runtime_context().get_node_id(), soft=True
        )
        return self.ray.remote(num_cpus=0)(_Counter).options(scheduling_strategy=here).remote()

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        self.refs[self.remote.remote(self.fn_ref, self.retry_on, list(chunk), self.counter)] = (
            chunk_id
        )

    def wait(self, timeout: float) -> list[Finished]:
        if not self.refs:
            return []
        ready, _ = self.ray.wait(
            list(self.refs), num_returns=len(self.refs), timeout=timeout, fetch_local=True
        )
        out: list[Finished] = []
        for ref in ready:
            cid = self.refs.pop(ref)
            try:
                out.append((cid, self.ray.get(ref)))
            except Exception as exc:  # noqa: BLE001 - worker crash, node loss, OOM kill
                out.append((cid, WorkerLost.of(exc, SHIP_HINT)))
        return out

    def counters(self) -> int:
        try:
            return int(self.ray.get(self.counter.take.remote(), timeout=30))
        except Exception:  # noqa: BLE001 - the actor's node died: count on with a new one
            self.counter = self._new_counter()
            return 0

    def close(self, cancel: bool) -> None:
        if cancel:
            for ref in self.refs:
                try:
                    self.ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - already finished
                    pass


class RayBackend(Backend):
    """Run on Ray. Options are passed to ``ray.init`` when Ray is not yet initialised."""

    name = "ray"

    def __init__(self, n_jobs: int | None = None, **options: Any) -> None:
        super().__init__(n_jobs, **options)
        self.ray = require("ray", "the ray backend")
        self._started = False

    def _ensure(self) -> None:
        if not self.ray.is_initialized():
            opts = dict(self.options)
            if self.n_jobs and "num_cpus" not in opts:
                opts["num_cpus"] = self.n_jobs
            opts.setdefault("include_dashboard", False)
            self.ray.init(**opts)
            self._started = True

    def slots(self) -> int:
        self._ensure()
        cpus = int(self.ray.cluster_resources().get("CPU", 1))
        return min(cpus, self.n_jobs) if self.n_jobs else max(1, cpus)

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        self._ensure()
        return _RaySession(self.ray, fn, retry_on)

    def close(self) -> None:
        if self._started:
            self.ray.shutdown()
            self._started = False
