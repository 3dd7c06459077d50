"""One rank of the gloo model-parallel-group tests (launched 4 times by test_distributed_groups.py).

``python _repl_worker.py DATA OUT PHASE STATE``; PHASE is one of

- ``groups``: 2 groups of 2 (``replication=2``), DataLoader(num_workers=2): a whole epoch 0, then
  epoch 1 up to step ``RESUME_AT``; rank 0 alone saves the state to STATE;
- ``resume``: 4 groups of 1, every rank loads STATE (saved by one rank) and ends epoch 1;
- ``mesh``: a 2 x 2 ``DeviceMesh`` named ("dp", "tp") and one named ("tp", "dp"), the errors of
  a wrong ``dp_dim=``, and a 1-D mesh without ``dp_dim=``.

Every step's batch ids are all-gathered (the two ranks of a group are compared at every step);
rank 0 writes what was gathered to OUT as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from shardwise import ConfigError, StreamingDataset

RESUME_AT = 9
BATCH = 16


def _gather(obj: Any) -> list[Any]:
    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def _steps(ds: Any, stop: int | None = None) -> list[list[list[int]]]:
    """Per step, every rank's batch ids (all-gathered each step, as a training step syncs)."""
    steps = []
    for step, batch in enumerate(DataLoader(ds, batch_size=BATCH, num_workers=2)):
        steps.append(_gather(batch["id"].tolist()))
        if stop is not None and step + 1 == stop:
            break
    counts = _gather(len(steps))
    assert len(set(counts)) == 1, f"ranks did different numbers of steps: {counts}"
    return steps


def _dataset(data: str, **kw: Any) -> Any:
    return StreamingDataset(data, batch_size=BATCH, seed=11, columns=["id"], **kw)


def groups(data: str, state_path: str) -> dict[str, Any]:
    ds = _dataset(data, replication=2)
    ds.set_epoch(0)
    epoch0 = _steps(ds)
    ds.set_epoch(1)
    head = _steps(ds, RESUME_AT)
    state = ds.state_dict(consumed_batches=RESUME_AT)
    states = _gather(state)
    if dist.get_rank() == 0:
        torch.save(state, state_path)
    return {
        "epoch0": epoch0,
        "head": head,
        "same_state": all(s == states[0] for s in states),
        "dp": _gather([ds.dp_rank, ds.dp_size]),
    }


def resume(data: str, state_path: str) -> dict[str, Any]:
    ds = _dataset(data)
    ds.load_state_dict(torch.load(state_path, weights_only=False))
    return {"tail": _steps(ds), "dp": _gather([ds.dp_rank, ds.dp_size])}


def mesh(data: str) -> dict[str, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    out: dict[str, Any] = {}
    for names in (("dp", "tp"), ("tp", "dp")):
        m = init_device_mesh("cpu", (2, 2), mesh_dim_names=names)
        ds = _dataset(data, device_mesh=m, dp_dim="dp")
        out["".join(names)] = {"dp": _gather([ds.dp_rank, ds.dp_size]), "steps": _steps(ds, 5)}
    out["errors"] = {}
    for kw in ({"dp_dim": "pp"}, {}, {"dp_dim": 2}):  # on the ("tp", "dp") mesh
        try:
            _dataset(data, device_mesh=m, **kw)
        except ConfigError as exc:
            out["errors"][repr(kw)] = str(exc)
    flat = init_device_mesh("cpu", (4,))  # one dimension: dp_dim may be left out
    out["flat"] = _gather([*map(int, [_dataset(data, device_mesh=flat).dp_rank, flat.size()])])
    return out


def main() -> None:
    data, out, phase, state_path = sys.argv[1:5]
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))
    if phase == "groups":
        report = groups(data, state_path)
    elif phase == "resume":
        report = resume(data, state_path)
    else:
        report = mesh(data)
    if dist.get_rank() == 0:
        with open(out, "w") as f:
            json.dump(report, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
