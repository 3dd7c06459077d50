"""One rank of the canonical-workers gloo test (launched by tests/loader/test_mix_distributed.py).

Argv: data root, output JSON, DataLoader workers, global batch, steps to stop after in
epoch 0 (-1: run both epochs whole), a state JSON to resume from or to write ("-": none).
Every rank trains a tiny DDP model on mixed sources with canonical_workers=4 and records
its batches' ids; rank 0 writes the global batches (step by step, ranks in order).
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from shardwise import Source, StreamingDataset


def main() -> None:
    root, out, workers, global_batch, stop, state_path = sys.argv[1:7]
    workers_n, stop_n = int(workers), int(stop)
    dist.init_process_group("gloo", timeout=timedelta(seconds=180))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    ds = StreamingDataset(
        [
            Source(f"{root}/web", weight=2.0, name="web"),
            Source(f"{root}/code", weight=1.0, name="code", columns={"id": "id", "x": "value"}),
        ],
        epoch_size=960,
        batch_size=int(global_batch) // world,
        canonical_workers=4,
        num_workers=workers_n,
        seed=21,
        batch_format="numpy",
        columns=["id", "x"],
    )
    if stop_n < 0 and state_path != "-":
        with open(state_path) as f:
            ds.load_state_dict(json.load(f))
    loader = DataLoader(ds, batch_size=None, num_workers=workers_n)
    report = []
    for epoch in (ds.epoch, ds.epoch + 1):
        if epoch != ds.epoch:
            ds.set_epoch(epoch)
        batches: list[list[int]] = []
        for batch in loader:
            x = torch.as_tensor(batch["x"]).float().unsqueeze(1)
            loss = (model(x) - x).pow(2).mean()
            opt.zero_grad()
            loss.backward()  # DDP all-reduces here: every rank must take every step
            opt.step()
            batches.append(batch["id"].tolist())
            if len(batches) == stop_n:
                break
        gathered: list[object] = [None] * world
        dist.all_gather_object(gathered, batches)
        report.append([[i for r in gathered for i in r[s]] for s in range(len(batches))])  # type: ignore[index]
        if stop_n >= 0:
            if rank == 0:
                with open(state_path, "w") as f:
                    json.dump(ds.state_dict(consumed_batches=stop_n), f)
            break
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
