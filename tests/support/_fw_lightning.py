"""Lightning Trainer(accelerator="cpu", devices=2, strategy="ddp") over a StreamingDataset in a
torchdata StatefulDataLoader with 2 workers; each rank records (epoch, ids) of every step.

    python _fw_lightning.py DATA OUT EPOCHS [CKPT]

Checkpoints every 27 steps into OUT/ckpt (the loader's state is in them: Lightning saves the
state_dict of a stateful dataloader); with CKPT the run resumes from that checkpoint.
"""

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
        self.data = data
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[tuple[int, list[int]]] = []

    def train_dataloader(self) -> Any:
        ds = StreamingDataset(
            self.data, batch_size=10, batch_format="torch", seed=4, columns=["id", "x"]
        )
        return StatefulDataLoader(ds, batch_size=None, num_workers=2)

    def training_step(self, batch: dict[str, Any], _: int) -> torch.Tensor:
        self.seen.append((self.current_epoch, batch["id"].tolist()))
        x = batch["x"].float().unsqueeze(1) / 1000
        return (self.layer(x) - x).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=1e-3)


def main() -> None:
    data, out, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ckpt = sys.argv[4] if len(sys.argv) > 4 else None
    model = Model(data)
    saver = L.pytorch.callbacks.ModelCheckpoint(
        dirpath=os.path.join(out, "ckpt"), every_n_train_steps=27, save_top_k=-1
    )
    trainer = L.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=epochs,
        callbacks=[saver],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, ckpt_path=ckpt)
    tag = "resumed" if ckpt else "full"
    with open(os.path.join(out, f"{tag}-{trainer.global_rank}.json"), "w") as f:
        json.dump(model.seen, f)
    torch.distributed.destroy_process_group()  # gloo's threads end before the interpreter


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
