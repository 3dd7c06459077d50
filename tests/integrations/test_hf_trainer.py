"""HF transformers ``Trainer``, 2 processes (torchrun, gloo on 127.0.0.1, cpu), 2 DataLoader
workers, a tiny model of our own (nothing downloaded).

The obvious ``Trainer(train_dataset=ds)`` (Accelerate's DataLoaderDispatcher: rank 0 serves
the whole epoch) and ``ShardwiseTrainer`` are both exact for numpy, torch and per-sample
batches (the default collator) over 2 epochs, and ``train(resume_from_checkpoint=...)`` from
a checkpoint 7 steps into epoch 1 continues exactly (the plain Trainer through accelerate's
``skip_first_batches``, served placeholders; ShardwiseTrainer from its own saved position)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _model(shapes: list[tuple[int, ...]], ids: list[int]) -> Any:
    """A one-weight model that records the shape and the ids of each batch it trains on."""
    import numpy as np
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(1, 1)

        def forward(self, id: Any, x: Any) -> dict[str, Any]:
            shapes.append(tuple(np.asarray(id).shape))
            ids.extend(np.asarray(id).reshape(-1).tolist())
            return {
                "loss": self.layer(torch.as_tensor(np.asarray(x)).float().reshape(-1, 1)).mean()
            }

    return Model


def _one_process_run(
    data: str, out: Path, fmt: str, workers: int, per_device: int, cls: Any
) -> Any:
    from transformers import TrainingArguments

    from shardwise import StreamingDataset

    shapes: list[tuple[int, ...]] = []
    ids: list[int] = []
    Model = _model(shapes, ids)

    ds = StreamingDataset(data, batch_size=10, columns=["id", "x"], seed=0, batch_format=fmt)
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=per_device,
        num_train_epochs=1,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
        save_strategy="no",
        dataloader_num_workers=workers,
    )
    trainer = cls(model=Model(), args=args, train_dataset=ds)
    trainer.train()
    return shapes, ids, trainer.state.global_step


@pytest.mark.parametrize(("fmt", "workers"), [("numpy", 0), ("torch", 2)])
def test_one_process_trainer_trains_on_the_datasets_own_batches(
    tmp_path: Path, fmt: str, workers: int
) -> None:
    """One process: Accelerate adds no wrapper, and the Trainer's DataLoader batches with
    the collator. Each batch is the dataset's rows, stacked again: 40 steps of 10 rows, not
    4 steps of 10 batches of 10; another per-device batch size is refused by both trainers."""
    from transformers import Trainer

    from shardwise import ConfigError
    from shardwise.integrations.hf import ShardwiseTrainer

    data = str(make_parquet(tmp_path / "ds", 400, files=3))
    shapes, ids, steps = _one_process_run(data, tmp_path / "o", fmt, workers, 10, Trainer)
    assert steps == 40 and set(shapes) == {(10,)} and sorted(ids) == list(range(400))
    for cls in (Trainer, ShardwiseTrainer):
        with pytest.raises(ConfigError, match="10"):
            _one_process_run(data, tmp_path / "o2", fmt, 0, 8, cls)


def _accumulating_run(data: str, out: Path, resume: str | None) -> tuple[list[int], Any]:
    """ShardwiseTrainer, one process, gradient accumulation of 3 over epochs of 20
    batches (the last optimizer step of each epoch has 2), 17 steps, a checkpoint every 4."""
    from transformers import TrainingArguments

    from shardwise import StreamingDataset
    from shardwise.integrations.hf import ShardwiseTrainer

    ids: list[int] = []
    Model = _model([], ids)

    ds = StreamingDataset(data, batch_size=10, columns=["id", "x"], seed=0, batch_format="numpy")
    args = TrainingArguments(
        output_dir=str(out),
        per_device_train_batch_size=10,
        gradient_accumulation_steps=3,
        max_steps=17,
        save_steps=4,
        report_to="none",
        use_cpu=True,
        disable_tqdm=True,
    )
    trainer = ShardwiseTrainer(model=Model(), args=args, train_dataset=ds)
    trainer.train(resume_from_checkpoint=resume)
    return ids, trainer.state


def test_a_resume_keeps_the_accumulation_of_an_epoch_it_does_not_divide(tmp_path: Path) -> None:
    """Resumed at step 8 (epoch 0 is 7 steps of 20 batches, then 3 batches of epoch 1),
    the run trains the batches the whole run trains after that step, with its steps: the
    epoch's last step syncs its 2 batches, so step 17 ends where it does uninterrupted
    (epoch 2.45, not 2.6)."""
    data = str(make_parquet(tmp_path / "ds", 200, files=2))
    whole, state = _accumulating_run(data, tmp_path / "out", None)
    rest, resumed = _accumulating_run(data, tmp_path / "out", str(tmp_path / "out/checkpoint-8"))
    assert len(whole) == 490 and rest == whole[230:]
    assert (resumed.global_step, resumed.epoch) == (state.global_step, state.epoch) == (17, 2.45)
