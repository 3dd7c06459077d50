"""One rank of the gloo token-stream test (run twice by tests/loader/tokens/test_distributed.py)."""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta

import torch.distributed as dist
from torch.utils.data import DataLoader

from shardwise.loader.tokens import TokenStream


def _epoch(loader: DataLoader, seq_len: int) -> tuple[int, list[list[int]]]:
    steps, seqs = 0, []
    for batch in loader:
        assert batch["input_ids"].shape[1] == seq_len
        for ids, mask in zip(batch["input_ids"], batch["loss_mask"]):
            seqs.append(ids[mask].tolist())
        steps += 1
    return steps, seqs


def main() -> None:
    data, seq_len, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    report = []
    for packing in ("pad", "best_fit"):
        ds = TokenStream(
            data,
            seq_len=seq_len,
            batch_size=2,
            packing=packing,
            seed=7,
            batch_format="torch",
            num_workers=2,
        )
        loader = DataLoader(ds, batch_size=None, num_workers=2)
        steps, seqs = _epoch(loader, seq_len)
        gathered: list[object] = [None] * world
        dist.all_gather_object(
            gathered,
            {"rank": rank, "steps": steps, "seqs": seqs, "len": len(ds), "stats": ds.stats()},
        )
        report.append(gathered)
        dist.barrier()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
