"""HF Accelerate, 2 processes (torchrun, gloo on 127.0.0.1, cpu), DataLoader workers.

The obvious code, ``accelerator.prepare(model, opt, DataLoader(ds, ...))``, would re-shard
the dataset (half of every epoch lost, or a crash on numpy batches); it is a ConfigError
naming the wrapper and the fix, with dispatch (accelerate's default) and without. A
``ShardwiseLoader`` is exact for numpy, torch and per-sample batches over 2 epochs that
advance by themselves, and ``save_state`` / ``load_state`` resume 7 steps into epoch 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fwcheck import check_exact, check_resume, free_port, load, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_accelerate.py")
ROWS = 403  # 2 ranks x 2 workers x 10: 400 per epoch, 20 steps per rank


def _torchrun(args: list[str], check: bool = True) -> str:
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    cmd = ["-m", "torch.distributed.run", "--nproc_per_node=2", *rdzv, SCRIPT, *args]
    if check:
        return run(cmd)
    import subprocess
    import sys

    p = subprocess.run([sys.executable, *cmd], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    return p.stdout + p.stderr


@pytest.mark.parametrize("mode", ["plain", "nodispatch"])
def test_a_resharding_wrapper_is_an_error_naming_it_and_the_fix(tmp_path: Path, mode: str) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    out = _torchrun([data, str(tmp_path), mode, "torch", "2"], check=False)
    wrapper = "DataLoaderDispatcher" if mode == "plain" else "IterableDatasetShard"
    assert f"ConfigError: a StreamingDataset is wrapped by accelerate.data_loader.{wrapper}" in out
    assert "ShardwiseLoader" in out and "ShardwiseTrainer" in out
    assert not (tmp_path / f"{mode}-0.json").exists()


@pytest.mark.parametrize("fmt", ["numpy", "torch", "samples"])
def test_shardwise_loader_is_exact_and_resumes_through_save_state(tmp_path: Path, fmt: str) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    _torchrun([data, str(tmp_path), "loader", fmt, "2"])
    full = load(tmp_path, "loader")
    check_exact(full, ROWS, epochs=2, slack=3)
    _torchrun([data, str(tmp_path), "loader", fmt, "2", "resume"])
    check_resume(full, load(tmp_path, "resumed"), 27)
