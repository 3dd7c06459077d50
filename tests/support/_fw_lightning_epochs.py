"""One Lightning process (``python _fw_lightning_epochs.py DATA OUT [CKPT]``): 2 epochs over a
StreamingDataset in a StatefulDataLoader with 2 workers, a checkpoint at every epoch's end
(Lightning's default ``ModelCheckpoint``; every ``STEPS`` steps with that variable set, at the
steps' end); the ids of every training step go to
``OUT/steps.json`` as ``[[epoch, ids], ...]``. With ``CKPT``, the run resumes from it.

``LOADER=shardwise``: a ShardwiseLoader instead. ``VAL=n``: a validation every ``n`` training
steps over the training dataset itself (a plain DataLoader, 2 workers), the ids of each
validation step going to ``OUT/val.json``."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from shardwise import StreamingDataset
from shardwise.integrations.loader import ShardwiseLoader


class Model(L.LightningModule):
    def __init__(self, data: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.data, self.steps, self.vals = data, [], []  # type: ignore[var-annotated]
        self.ds: StreamingDataset | None = None

    def train_dataloader(self) -> Any:
        self.ds = StreamingDataset(self.data, batch_size=10, batch_format="torch", columns=["id"])
        if os.environ.get("LOADER") == "shardwise":
            return ShardwiseLoader(self.ds, num_workers=2)
        return StatefulDataLoader(self.ds, batch_size=None, num_workers=2)

    def val_dataloader(self) -> Any:
        assert self.ds is not None  # Lightning sets up the training data first
        return DataLoader(self.ds, batch_size=None, num_workers=2)

    def training_step(self, batch: Any, _: int) -> Any:
        self.steps.append([self.current_epoch, batch["id"].tolist()])
        x = batch["id"].float().unsqueeze(1) / 1000
        return (self.layer(x) - x).pow(2).mean()

    def validation_step(self, batch: Any, _: int) -> None:
        self.vals.append(batch["id"].tolist())

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def _validation() -> dict[str, Any]:
    if "VAL" not in os.environ:
        return {"limit_val_batches": 0}
    return {"val_check_interval": int(os.environ["VAL"]), "num_sanity_val_steps": 0}


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
        **_validation(),
    )
    model = Model(data)
    trainer.fit(model, ckpt_path=sys.argv[3] if len(sys.argv) > 3 else None)
    with open(f"{out}/steps.json", "w") as f:
        json.dump(model.steps, f)
    with open(f"{out}/val.json", "w") as f:
        json.dump(model.vals, f)
