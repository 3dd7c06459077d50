"""HF transformers ``Trainer``, 2 processes (torchrun, gloo on 127.0.0.1, cpu), 2 DataLoader
workers, a tiny model of our own (nothing downloaded).

``Trainer(train_dataset=ds)`` would re-shard the dataset through Accelerate (half of every
epoch lost); it is a ConfigError naming the wrapper and the fix. ``ShardwiseTrainer`` is
exact for numpy, torch and per-sample batches (the default collator) over 2 epochs, and
``train(resume_from_checkpoint=...)`` from a checkpoint 7 steps into epoch 1 continues
exactly, without replaying the trained batches."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from _fwcheck import check_exact, check_resume, free_port, load, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_trainer.py")
ROWS = 403  # 2 ranks x 2 workers x 10: 400 per epoch, 20 steps per rank


def _cmd(args: list[str]) -> list[str]:
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return ["-m", "torch.distributed.run", "--nproc_per_node=2", *rdzv, SCRIPT, *args]


def test_plain_trainer_is_an_error_naming_the_wrapper_and_the_fix(tmp_path: Path) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    cmd = [sys.executable, *_cmd([data, str(tmp_path), "plain", "samples", "2"])]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode != 0
    assert "ConfigError: a StreamingDataset is wrapped by accelerate.data_loader." in out
    assert "shardwise.integrations.hf.ShardwiseTrainer" in out


@pytest.mark.parametrize("fmt", ["numpy", "torch", "samples"])
def test_shardwise_trainer_is_exact_and_resumes_from_its_checkpoint(
    tmp_path: Path, fmt: str
) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    run(_cmd([data, str(tmp_path), "shardwise", fmt, "2"]))
    full = load(tmp_path, "shardwise")
    check_exact(full, ROWS, epochs=2, slack=3)
    ckpt = str(tmp_path / "run" / "checkpoint-27")  # 7 steps into epoch 1
    run(_cmd([data, str(tmp_path), "shardwise", fmt, "2", ckpt]))
    check_resume(full, load(tmp_path, "resumed"), 27)
