"""One rank of the gloo DDP test (launched 4 times by test_distributed.py, like torchrun)."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from shardwise import StreamingDataset


def main() -> None:
    data, out = sys.argv[1], sys.argv[2]
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ds = StreamingDataset(data, batch_size=16, num_workers=2, seed=11, columns=["id", "x"])
    assert (ds.rank, ds.world_size) == (rank, world)
    loader = DataLoader(ds, batch_size=16, num_workers=2)
    report = []
    for epoch in range(2):
        ds.set_epoch(epoch)
        ids: list[int] = []
        steps = 0
        for batch in loader:
            x = batch["x"].float().unsqueeze(1) / 10_000
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()  # DDP all-reduces gradients here, every step
            opt.step()
            ids.extend(batch["id"].tolist())
            steps += 1
        gathered: list[object] = [None] * world
        dist.all_gather_object(gathered, {"rank": rank, "steps": steps, "ids": ids})
        report.append(gathered)
        dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
