"""What must reach the workers: an operator that cannot be pickled is refused by name before
any task starts; a module the workers cannot import is reported at once (not retried as a
lost worker), naming the module and how to ship it."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _engines import make_backend
from _pipeline_common import make_input

from shardwise.errors import ConfigError, TaskError
from shardwise.parallel import parallel_map
from shardwise.parallel.backend import Backend, Finished, Session, WorkerLost
from shardwise.pipeline import read_jsonl


def _locked_op() -> Any:
    lock = threading.Lock()

    def op(batch: pa.RecordBatch) -> pa.RecordBatch:
        with lock:
            return batch

    return op


@pytest.mark.parametrize("name", ["local", pytest.param("ray", marks=pytest.mark.engine)])
def test_an_unpicklable_operator_is_refused_before_any_task(
    name: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    src = make_input(tmp_path / "in", files=1, rows=50)
    out = tmp_path / "o"
    backend = make_backend(name, request)
    pipe = read_jsonl(str(src)).map(_locked_op()).write_parquet(str(out))
    with pytest.raises(ConfigError, match=r"operator 'op' cannot be pickled.*lock.*picklable"):
        pipe.run(backend, progress=False)
    assert not (tmp_path / ".o.shardwise-partial").exists()  # nothing staged, nothing run
    assert not out.exists()


def test_an_unpicklable_operator_runs_on_threads(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=1, rows=50)
    pipe = read_jsonl(str(src)).map(_locked_op()).write_parquet(str(tmp_path / "o"))
    assert pipe.run("thread", progress=False).rows_out == 50


class _NoModuleSession(Session):
    """Every chunk's job fails as an engine reports a task it could not load."""

    def __init__(self, submitted: list[int]) -> None:
        self.submitted = submitted
        self.ready: list[int] = []

    def submit(self, chunk_id: int, chunk: Sequence[tuple[int, Any]]) -> None:
        self.submitted.append(chunk_id)
        self.ready.append(chunk_id)

    def wait(self, timeout: float) -> list[Finished]:
        error = RuntimeError("System error: No module named 'deepops'")
        out: list[Finished] = [(c, WorkerLost.of(error, "ship it so")) for c in self.ready]
        self.ready = []
        return out

    def close(self, cancel: bool) -> None:
        pass


class _NoModuleBackend(Backend):
    name = "nomodule"

    def __init__(self) -> None:
        super().__init__(1)
        self.submitted: list[int] = []

    def slots(self) -> int:
        return 1

    def open(self, fn: Any, retry_on: Any, parallelism: int) -> Session:
        return _NoModuleSession(self.submitted)


def test_a_module_the_worker_cannot_import_is_not_retried() -> None:
    backend = _NoModuleBackend()
    with pytest.raises(TaskError, match=r"import module 'deepops'.*ship it so") as info:
        parallel_map(abs, [1, 2, 3], backend=backend, progress=False, max_in_flight=1)
    assert "worker lost" not in str(info.value)
    assert backend.submitted == [0]  # raised at once: no retry


def test_a_lost_worker_is_still_retried() -> None:
    lost = WorkerLost.of(RuntimeError("node died"), "hint")
    assert lost.missing == ""
    assert WorkerLost.of(ModuleNotFoundError("x", name="pkg.mod"), "h").missing == "pkg.mod"


@pytest.mark.engine
def test_ray_names_a_module_only_the_driver_can_import(
    tmp_path: Path, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "sw_driver_only_ops.py").write_text(
        "def keep_all(batch):\n    return batch.append_column('k', batch.column('id'))\n"
    )
    monkeypatch.syspath_prepend(str(lib))  # as a script's sys.path.insert; workers lack it
    module = importlib.import_module("sw_driver_only_ops")
    try:
        src = make_input(tmp_path / "in", files=1, rows=50)
        pipe = read_jsonl(str(src)).map(module.keep_all).write_parquet(str(tmp_path / "o"))
        with pytest.raises(TaskError, match=r"'sw_driver_only_ops'.*py_modules") as info:
            pipe.run(make_backend("ray", request), progress=False)
        assert "worker lost" not in str(info.value)
    finally:
        sys.modules.pop("sw_driver_only_ops", None)
