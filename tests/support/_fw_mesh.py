"""A torch DeviceMesh with a data-parallel dimension (torchtitan style) on 2 processes:
``init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))``, the dataset's dp rank and size
from the mesh, DDP over the mesh, a DataLoader with 2 workers, epochs that advance by
themselves, and torch.distributed.checkpoint (DCP) saving the loader's position with the
model after 27 steps.

    torchrun --nproc_per_node=2 _fw_mesh.py DATA OUT EPOCHS [resume]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from shardwise import StreamingDataset


class LoaderState:
    """The loader's position as a DCP Stateful (every rank saves the same one)."""

    def __init__(self, ds: Any) -> None:
        self.ds, self.consumed = ds, 0

    def state_dict(self) -> dict[str, Any]:
        return {"json": json.dumps(self.ds.state_dict(consumed_batches=self.consumed))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.ds.load_state_dict(json.loads(state["json"]))


def main() -> None:
    data, out, epochs = sys.argv[1], sys.argv[2], int(sys.argv[3])
    resume = len(sys.argv) > 4
    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (2,), mesh_dim_names=("dp",))
    ds = StreamingDataset(
        data,
        batch_size=10,
        batch_format="torch",
        seed=4,
        columns=["id", "x"],
        device_mesh=mesh,
        dp_dim="dp",
    )
    loader = DataLoader(ds, batch_size=None, num_workers=2)
    model = DistributedDataParallel(torch.nn.Linear(1, 1), device_mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    position = LoaderState(ds)
    if resume:
        dcp.load(
            {"model": model.state_dict(), "data": position}, checkpoint_id=os.path.join(out, "dcp")
        )
    step, seen = 0, []
    for epoch in range(ds.epoch, epochs):  # each pass over the loader is the next epoch
        for position.consumed, batch in enumerate(loader, 1):
            seen.append((epoch, batch["id"].tolist()))
            x = batch["x"].float().unsqueeze(1) / 1000
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            step += 1
            if step == 27 and not resume:
                dcp.save(
                    {"model": model.state_dict(), "data": position},
                    checkpoint_id=os.path.join(out, "dcp"),
                )
    with open(
        os.path.join(out, f"{'resumed' if resume else 'full'}-{dist.get_rank()}.json"), "w"
    ) as f:
        json.dump(seen, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
