"""Ray Train ``TorchTrainer`` with 2 workers (gloo on the local node), each streaming a
StreamingDataset through a DataLoader with 2 workers; ``set_epoch`` each epoch as Ray's
docs do; after 27 steps rank 0 reports a checkpoint with the loader's position.

    python _fw_ray.py DATA OUT EPOCHS [resume]

With ``resume`` the trainer resumes from the first run's checkpoint (its path in the config);
each rank writes (epoch, ids) per step to OUT/<full|resumed>-<rank>.json.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import ray
import ray.train
import torch
from ray.train.torch import TorchTrainer, prepare_model
from torch.utils.data import DataLoader

from shardwise import StreamingDataset


def train(config: dict[str, Any]) -> None:
    ds = StreamingDataset(
        config["data"], batch_size=10, batch_format="torch", seed=4, columns=["id", "x"]
    )
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    model = prepare_model(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ckpt = ray.train.get_checkpoint()  # a restarted run's own, or the one to resume from
    if ckpt is None and config["resume"]:
        ckpt = ray.train.Checkpoint(config["resume"])
    if ckpt:
        with ckpt.as_directory() as d, open(os.path.join(d, "loader.json")) as f:
            ds.load_state_dict(json.load(f))
    rank, step, seen = ray.train.get_context().get_world_rank(), 0, []
    for epoch in range(ds.epoch, config["epochs"]):
        ds.set_epoch(epoch)  # as Ray's docs do; a resumed epoch keeps its resume point
        for in_epoch, batch in enumerate(loader, 1):
            seen.append((epoch, batch["id"].tolist()))
            x = batch["x"].float().unsqueeze(1) / 1000
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == 27 and not ckpt:
                state = ds.state_dict(consumed_batches=in_epoch)
                with tempfile.TemporaryDirectory() as d:
                    if rank == 0:
                        with open(os.path.join(d, "loader.json"), "w") as f:
                            json.dump(state, f)
                    saved = ray.train.Checkpoint.from_directory(d) if rank == 0 else None
                    ray.train.report({"step": step}, checkpoint=saved)
    with open(
        os.path.join(config["out"], f"{'resumed' if ckpt else 'full'}-{rank}.json"), "w"
    ) as f:
        json.dump(seen, f)


def main() -> None:
    data, out, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resume = len(sys.argv) > 4
    ray.init(num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1", log_to_driver=False)
    saved = os.path.join(out, "checkpoint.txt")
    checkpoint = Path(saved).read_text() if resume else None  # Ray Train 2: via the config
    trainer = TorchTrainer(
        train,
        train_loop_config={"data": data, "out": out, "epochs": epochs, "resume": checkpoint},
        scaling_config=ray.train.ScalingConfig(num_workers=2, use_gpu=False),
        run_config=ray.train.RunConfig(
            storage_path=os.path.join(out, "ray"), name="resumed" if resume else "full"
        ),
    )
    result = trainer.fit()
    if not resume:
        with open(saved, "w") as f:
            f.write(result.checkpoint.path)
    ray.shutdown()


if __name__ == "__main__":
    main()
