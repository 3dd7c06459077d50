"""HF transformers ``Trainer``, 2 processes (torchrun, gloo on 127.0.0.1, cpu), 2 DataLoader
workers, a tiny model of our own (nothing downloaded).

The obvious ``Trainer(train_dataset=ds)`` (Accelerate's DataLoaderDispatcher: rank 0 serves
the whole epoch) and ``ShardwiseTrainer`` are both exact for numpy, torch and per-sample
batches (the default collator) over 2 epochs, and ``train(resume_from_checkpoint=...)`` from
a checkpoint 7 steps into epoch 1 continues exactly (the plain Trainer through accelerate's
``skip_first_batches``, served placeholders; ShardwiseTrainer from its own saved position)."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fwcheck import check_modes, free_port, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_trainer.py")
ROWS = 403  # 2 ranks x 2 workers x 10: 400 per epoch, 20 steps per rank
FORMATS = ["numpy", "torch", "samples"]
MODES = ["plain", "shardwise"]


def _cmd(args: list[str]) -> list[str]:
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return ["-m", "torch.distributed.run", "--nproc_per_node=2", *rdzv, SCRIPT, *args]


def test_trainer_is_exact_and_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    """Each mode and format in turn in the same two processes (a new Trainer each): the
    processes' start, torch's and transformers' imports, is paid once per run."""
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    check_modes(lambda args: run(_cmd(args)), data, tmp_path, MODES, FORMATS, ROWS)
