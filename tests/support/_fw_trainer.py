"""HF transformers Trainer on 2 processes (torchrun, gloo, cpu) over a StreamingDataset.

    torchrun --nproc_per_node=2 _fw_trainer.py DATA OUT MODES FORMATS EPOCHS [resume]

MODES, separated by commas: ``plain``, ``Trainer(train_dataset=ds)``; ``shardwise``,
ShardwiseTrainer. Each saves a checkpoint every 27 steps (with ``resume``: resumed from it).
FORMATS: batch_formats (``numpy``, ``torch``) or ``samples`` (per sample, the default data
collator), separated by commas. Each mode and format is trained in turn in the same
processes (a new Trainer each), in OUT/<mode>/<format>. A tiny model of our own (nothing
downloaded); each rank writes (epoch, ids) per step to OUT/<mode>/<format>/<tag>-<rank>.json.

The environment may change the run: ``FW_WORKERS`` (DataLoader workers, default 2),
``FW_ACCUM`` (gradient accumulation steps, default 1), ``FW_MAX_STEPS`` (the Trainer's
``max_steps``, default none: the epochs bound the run), ``FW_SAVE_STEPS`` (default 27),
``FW_EVAL`` (set: evaluate on the training dataset every 5 steps) and ``FW_CHECKPOINT`` (the
checkpoint ``resume`` continues, default the run's own ``checkpoint-27``).
"""

from __future__ import annotations

import gc
import json
import os
import sys
from typing import Any

import numpy as np
import torch
import transformers

from shardwise import StreamingDataset


class Tiny(torch.nn.Module):
    """A model the Trainer can train: it returns a loss and notes the ids of each batch."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.epoch = 0
        self.seen: list[tuple[int, list[int]]] = []

    def forward(self, id: Any, x: Any) -> dict[str, torch.Tensor]:
        if self.training:
            self.seen.append((self.epoch, np.asarray(id).tolist()))
        x = torch.as_tensor(np.asarray(x), dtype=torch.float32).unsqueeze(1) / 1000
        return {"loss": (self.layer(x) - x).pow(2).mean()}


class Epochs(transformers.TrainerCallback):
    def __init__(self, model: Tiny) -> None:
        self.model = model

    def on_epoch_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.model.epoch = int(state.epoch or 0)


def main() -> None:
    data, out, modes, formats, epochs = sys.argv[1:6]
    resume = len(sys.argv) > 6
    trainer = None
    for mode in modes.split(","):
        for fmt in formats.split(","):
            if trainer is not None:
                trainer.accelerator.wait_for_everyone()
                trainer.accelerator.free_memory()
            where = os.path.join(out, mode, fmt)
            trainer = train(data, where, mode, fmt, int(epochs), resume)
    assert trainer is not None
    end(trainer)


def train(
    data: str, out: str, mode: str, fmt: str, epochs: int, resume: bool
) -> transformers.Trainer:
    batch_format = None if fmt == "samples" else fmt
    ds = StreamingDataset(
        data, batch_size=10, batch_format=batch_format, seed=4, columns=["id", "x"]
    )
    args = transformers.TrainingArguments(
        output_dir=os.path.join(out, "run"),
        per_device_train_batch_size=10,
        num_train_epochs=epochs,
        save_strategy="steps",
        save_steps=int(os.environ.get("FW_SAVE_STEPS", "27")),
        report_to="none",
        dataloader_num_workers=int(os.environ.get("FW_WORKERS", "2")),
        gradient_accumulation_steps=int(os.environ.get("FW_ACCUM", "1")),
        max_steps=int(os.environ.get("FW_MAX_STEPS", "-1")),
        use_cpu=True,
        learning_rate=1e-3,
        logging_strategy="no",
        **_evaluation(),
    )
    model = Tiny()
    if mode == "plain":
        trainer = transformers.Trainer(model=model, args=args, train_dataset=ds, **_eval_on(ds))
    else:
        from shardwise.integrations.hf import ShardwiseTrainer

        trainer = ShardwiseTrainer(model=model, args=args, train_dataset=ds, **_eval_on(ds))
    trainer.add_callback(Epochs(model))
    own = os.path.join(out, "run", "checkpoint-27")  # 7 steps into epoch 1 (2 processes)
    ckpt = os.environ.get("FW_CHECKPOINT", own) if resume else None
    trainer.train(resume_from_checkpoint=ckpt)
    tag = "resumed" if resume else mode
    with open(os.path.join(out, f"{tag}-{args.process_index}.json"), "w") as f:
        json.dump(model.seen, f)
    return trainer


def _evaluation() -> dict[str, Any]:
    if "FW_EVAL" not in os.environ:
        return {}
    return {"eval_strategy": "steps", "eval_steps": 5, "per_device_eval_batch_size": 10}


def _eval_on(ds: StreamingDataset) -> dict[str, Any]:
    return {"eval_dataset": ds} if "FW_EVAL" in os.environ else {}


def end(trainer: transformers.Trainer) -> None:
    """End the process group before Python exits, after the DDP model that holds it is gone
    (gloo's threads must not be joined during the interpreter's teardown)."""
    accelerator = trainer.accelerator
    accelerator.wait_for_everyone()
    accelerator.free_memory()
    trainer.model_wrapped = trainer.model = trainer.optimizer = None
    gc.collect()
    accelerator.end_training()


if __name__ == "__main__":
    main()
