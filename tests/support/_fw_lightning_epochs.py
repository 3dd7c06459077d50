"""One Lightning process (``python _fw_lightning_epochs.py DATA OUT [CKPT]``): 2 epochs over a
StreamingDataset in a StatefulDataLoader with 2 workers, a checkpoint at every epoch's end
(Lightning's default ``ModelCheckpoint``; every ``STEPS`` steps with that variable set, at the
steps' end); the ids of every training step go to
``OUT/steps.json`` as ``[[epoch, ids], ...]``. With ``CKPT``, the run resumes from it."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import lightning as L
import torch
from torchdata.stateful_dataloader import StatefulDataLoader

from shardwise import StreamingDataset


class Model(L.LightningModule):
    def __init__(self, data: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.data, self.steps = data, []  # type: ignore[var-annotated]

    def train_dataloader(self) -> Any:
        ds = StreamingDataset(self.data, batch_size=10, batch_format="torch", columns=["id"])
        return StatefulDataLoader(ds, batch_size=None, num_workers=2)

    def training_step(self, batch: Any, _: int) -> Any:
        self.steps.append([self.current_epoch, batch["id"].tolist()])
        x = batch["id"].float().unsqueeze(1) / 1000
        return (self.layer(x) - x).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


if __name__ == "__main__":
    data, out = sys.argv[1], sys.argv[2]
    every = int(os.environ["STEPS"]) if "STEPS" in os.environ else None
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[
            L.pytorch.callbacks.ModelCheckpoint(
                f"{out}/ckpt", save_top_k=-1, every_n_train_steps=every
            )
        ],
    )
    model = Model(data)
    trainer.fit(model, ckpt_path=sys.argv[3] if len(sys.argv) > 3 else None)
    with open(f"{out}/steps.json", "w") as f:
        json.dump(model.steps, f)
