"""One training job reading a dataset through a node cache (run as a script by tests).

Usage: python _cachejob.py SPEC_JSON
SPEC keys: source, storage_options, cache_dir, cache_bytes, seed, rank, world_size,
num_workers, format, out (a JSON file receiving the ids in order), and optionally
unit_bytes (JSONL), columns (the projection; it must hold "id") and started (a file
touched after the first batch).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import numpy as np


def run(spec: dict[str, Any]) -> list[int]:
    from torch.utils.data import DataLoader

    from shardwise import StreamingDataset

    extra = {"unit_bytes": spec["unit_bytes"]} if spec.get("unit_bytes") else {}
    if spec.get("columns"):
        extra["columns"] = spec["columns"]
    ds = StreamingDataset(
        spec["source"],
        storage_options=spec["storage_options"],
        format=spec["format"],
        cache_dir=spec["cache_dir"],
        cache_bytes=spec["cache_bytes"],
        batch_size=8,
        seed=spec["seed"],
        rank=spec["rank"],
        world_size=spec["world_size"],
        num_workers=spec["num_workers"],
        batch_format="numpy",
        **extra,
    )
    ids: list[int] = []
    loader = DataLoader(ds, batch_size=None, num_workers=spec["num_workers"])
    for batch in loader:
        ids.extend(int(v) for v in np.asarray(batch["id"]).tolist())
        if spec.get("started"):
            open(spec["started"], "w").close()
    return ids


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    ids = run(spec)
    with open(spec["out"], "w") as f:
        json.dump(ids, f)
