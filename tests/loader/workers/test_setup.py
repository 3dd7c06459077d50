"""The process set-up of streaming: a DataLoader worker makes jemalloc Arrow's allocator
unless ``ARROW_DEFAULT_MEMORY_POOL`` chooses; the training process keeps its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _loaderdata import make_parquet

SCRIPT = """
import sys
import pyarrow as pa
from shardwise import StreamingDataset

from shardwise.loader.workers.setup import setup_worker

default = pa.default_memory_pool().backend_name
ds = StreamingDataset(
    sys.argv[1], batch_size=64, batch_format="numpy", num_workers=None, progress=False
)
rows = sum(len(b["id"]) for b in ds)
assert pa.default_memory_pool().backend_name == default  # in-process iteration leaves it alone
before = pa.array(range(1000))  # made by the pool in place before the worker set-up
setup_worker("numpy")
assert before.sum().as_py() == 499500
print(rows, pa.default_memory_pool().backend_name)
"""


@pytest.mark.parametrize("env_pool", [None, "system"])
def test_workers_prefer_jemalloc_unless_the_environment_chooses(
    tmp_path: Path, env_pool: str | None
) -> None:
    data = make_parquet(tmp_path / "ds", 1000, files=2)
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if env_pool is not None:
        env["ARROW_DEFAULT_MEMORY_POOL"] = env_pool
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(data)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    rows, backend = out.stdout.split()
    assert int(rows) > 0
    assert backend == (env_pool or "jemalloc")
