"""Lightning Fabric (cpu, 2 devices, ddp) over a StreamingDataset in per-sample mode with a
DataLoader of 2 workers (``setup_dataloaders``); each rank records (epoch, ids) per step.

    python _fw_fabric.py DATA OUT EPOCHS [CKPT]

Saves ``OUT/state.ckpt`` after 27 steps (model, optimizer, the loader's position); with CKPT
the run resumes from it.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader

from shardwise import StreamingDataset


def main() -> None:
    data, out, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ckpt = sys.argv[4] if len(sys.argv) > 4 else None
    fabric = L.Fabric(accelerator="cpu", devices=2, strategy="ddp")
    fabric.launch()
    ds = StreamingDataset(data, batch_size=10, seed=4, columns=["id", "x"])
    loader = fabric.setup_dataloaders(DataLoader(ds, batch_size=10, num_workers=2))
    model = torch.nn.Linear(1, 1)
    model, opt = fabric.setup(model, torch.optim.SGD(model.parameters(), lr=1e-3))
    state: dict[str, Any] = {"model": model, "opt": opt, "step": 0, "data": None}
    if ckpt:
        fabric.load(ckpt, state)
        ds.load_state_dict(state["data"])  # before iterating: that epoch, from that batch
    step, seen = state["step"], []
    for epoch in range(ds.epoch, epochs):  # each pass over the loader is the next epoch
        for in_epoch, batch in enumerate(loader, 1):
            seen.append((epoch, batch["id"].tolist()))
            x = batch["x"].float().unsqueeze(1) / 1000
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            fabric.backward(loss)
            opt.step()
            step += 1
            if step == 27 and not ckpt:
                state.update(step=step, data=ds.state_dict(consumed_batches=in_epoch))
                fabric.save(os.path.join(out, "state.ckpt"), state)
    with open(
        os.path.join(out, f"{'resumed' if ckpt else 'full'}-{fabric.global_rank}.json"), "w"
    ) as f:
        json.dump(seen, f)
    torch.distributed.destroy_process_group()  # gloo's threads end before the interpreter


if __name__ == "__main__":
    main()
