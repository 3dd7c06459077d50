"""The process set-up of streaming: a DataLoader worker, and the training process once it
iterates in-process, make jemalloc Arrow's allocator unless ``ARROW_DEFAULT_MEMORY_POOL``
chooses."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from _loaderdata import make_parquet
from _pyscript import run_script

SCRIPT = """
import sys
import pyarrow as pa
from shardwise import StreamingDataset

from shardwise.loader.workers.setup import setup_worker

default = pa.default_memory_pool().backend_name
before = pa.array(range(1000))  # made by the pool in place before the switch
ds = StreamingDataset(
    sys.argv[1], batch_size=64, batch_format="numpy", num_workers=None, progress=False
)
assert pa.default_memory_pool().backend_name == default  # building a dataset changes nothing
rows = sum(len(b["id"]) for b in ds)
inprocess = pa.default_memory_pool().backend_name
setup_worker("numpy")
assert before.sum().as_py() == 499500
del before  # freed by the pool that made it
print(rows, default, inprocess, pa.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize("env_pool", [None, "system"])
def test_streaming_prefers_jemalloc_unless_the_environment_chooses(
    tmp_path: Path, env_pool: str | None
) -> None:
    data = make_parquet(tmp_path / "ds", 1000, files=2)
    out = run_script(SCRIPT, str(data), name="ARROW_DEFAULT_MEMORY_POOL", value=env_pool)
    rows, default, inprocess, worker = out.split()
    assert int(rows) > 0
    assert default != "jemalloc" or env_pool is not None  # pyarrow's own default, or the env's
    assert inprocess == worker == (env_pool or "jemalloc")


@pytest.mark.parametrize("env", [None, "0"])
def test_the_training_process_keeps_freed_memory_once_a_ring_is_mapped(
    monkeypatch: pytest.MonkeyPatch, env: str | None
) -> None:
    from shardwise.loader.workers import receive, ring

    calls: list[bool] = []
    monkeypatch.setattr(receive, "keep_freed_memory", lambda: calls.append(True) or True)
    if env is None:
        monkeypatch.delenv("SHARDWISE_KEEP_FREED", raising=False)
    else:
        monkeypatch.setenv("SHARDWISE_KEEP_FREED", env)
    shm = ring.Ring(1 << 16)
    placed = shm.put([np.arange(10, dtype=np.int64)])
    assert placed is not None
    got = receive.rebuild_batch(os.getpid(), shm.fd, shm.token, *placed, [("a", "a", "<i8", (10,))])
    assert got["a"].tolist() == list(range(10))
    assert calls == ([] if env == "0" else [True])


def test_workers_keep_freed_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardwise.loader.workers import setup

    calls: list[bool] = []
    monkeypatch.setattr(setup, "keep_freed_memory", lambda: calls.append(True) or True)
    monkeypatch.setattr(setup, "enable", lambda ring_bytes: None)
    monkeypatch.setattr(setup, "freeze_inherited", lambda: calls.append(False) or True)
    monkeypatch.setenv("ARROW_DEFAULT_MEMORY_POOL", "system")
    setup.setup_worker("numpy")
    assert calls == [True, False]  # memory kept, then the process's objects frozen


FREEZE = """
import gc, os, sys
from shardwise.loader.workers.setup import freeze_inherited

first = freeze_inherited()
frozen = gc.get_freeze_count()
junk = [[i] for i in range(1000)]  # new objects after the freeze stay collectable
again = freeze_inherited()
pid = os.fork()
if pid == 0:  # a forked child (a DataLoader worker of a worker) freezes for itself
    os._exit(0 if freeze_inherited() and gc.get_freeze_count() >= frozen else 1)
_, status = os.waitpid(pid, 0)
print(first, frozen, again, gc.get_freeze_count() == frozen, os.waitstatus_to_exitcode(status))
"""


@pytest.mark.parametrize("env", [None, "0"])
def test_a_worker_freezes_what_it_has_once_per_process(env: str | None) -> None:
    out = run_script(FREEZE, name="SHARDWISE_GC_FREEZE", value=env)
    first, frozen, again, unchanged, child = out.split()
    if env == "0":
        assert (first, frozen, again, unchanged) == ("False", "0", "False", "True")
    else:
        assert first == "True" and int(frozen) > 1000  # the interpreter's and shardwise's objects
        assert again == "False" and unchanged == "True" and child == "0"


def test_dataloader_workers_stream_with_their_objects_frozen(tmp_path: Path) -> None:
    import gc

    from torch.utils.data import DataLoader

    from shardwise import StreamingDataset

    data = make_parquet(tmp_path / "ds", 600, files=2)
    ds = StreamingDataset(str(data), batch_size=100, batch_format="numpy", progress=False)
    loader = DataLoader(
        ds, batch_size=None, num_workers=2, collate_fn=lambda b: (b, gc.get_freeze_count())
    )
    before = gc.get_freeze_count()
    got = list(loader)
    assert sum(len(b["id"]) for b, _ in got) == 600
    assert all(count > before for _, count in got)  # counted in the worker, after its set-up
    assert gc.get_freeze_count() == before  # the training process is left alone


def test_an_allocator_set_in_code_is_kept(tmp_path: Path) -> None:
    data = make_parquet(tmp_path / "ds", 1000, files=2)
    script = (
        "import sys, pyarrow as pa\n"
        "from shardwise import StreamingDataset\n"
        "pa.set_memory_pool(pa.system_memory_pool())\n"
        "ds = StreamingDataset(sys.argv[1], batch_size=64, batch_format='numpy',"
        " num_workers=None, progress=False)\n"
        "rows = sum(len(b['id']) for b in ds)\n"
        "print(rows, pa.default_memory_pool().backend_name)\n"
    )
    rows, backend = run_script(script, str(data), name="ARROW_DEFAULT_MEMORY_POOL").split()
    assert int(rows) > 0 and backend == "system"
