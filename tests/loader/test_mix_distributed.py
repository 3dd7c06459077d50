"""Canonical workers in a real torch.distributed run (gloo on 127.0.0.1): 4 ranks x 1
DataLoader worker, 2 x 2 and 1 x 4 record the same global batches of mixed sources for
two epochs, and a job stopped mid-epoch on 4 ranks resumes on 2 with the same sequence."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _fwcheck import free_port, launch

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "support", "_ddp_mix_worker.py")
GLOBAL_BATCH = 16


def _data(root: Path) -> Path:
    (root / "web").mkdir(parents=True)
    (root / "code").mkdir()
    for k, (lo, hi) in enumerate([(0, 450), (450, 1100)]):
        ids = np.arange(lo, hi)
        pq.write_table(
            pa.table({"id": ids, "x": ids * 0.001}),
            root / "web" / f"p{k}.parquet",
            row_group_size=70,
        )
    with open(root / "code" / "c.jsonl", "w") as f:
        f.writelines(json.dumps({"id": 10_000 + i, "value": i * 0.01}) + "\n" for i in range(300))
    return root


def _run(
    root: Path, tmp: Path, world: int, workers: int, stop: int = -1, state: str = "-"
) -> list[list[list[int]]]:
    out = tmp / f"out-{world}x{workers}-{stop}-{os.path.basename(state)}.json"
    port = free_port()
    commands, envs = [], []
    for rank in range(world):
        envs.append(
            dict(
                os.environ,
                MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(port),
                RANK=str(rank),
                WORLD_SIZE=str(world),
                LOCAL_RANK=str(rank),
                GLOO_SOCKET_IFNAME="lo",
                SHARDWISE_CACHE_DIR=str(tmp / "cache"),
            )
        )
        args = [str(root), str(out), str(workers), str(GLOBAL_BATCH), str(stop), state]
        commands.append([sys.executable, SCRIPT, *args])
    # a rank whose DataLoader worker hangs in os.fork (CPython gh-112275) runs once more
    launch(commands, envs, timeout=240)
    report: list[list[list[int]]] = json.loads(out.read_text())
    return report


@pytest.mark.engine
@pytest.mark.slow
@pytest.mark.timeout(1500)  # five runs, one of them possibly run twice
def test_the_same_global_batches_on_4x1_2x2_1x4_and_after_a_resume_from_4_onto_2(
    tmp_path: Path,
) -> None:
    root = _data(tmp_path / "data")
    reference = _run(root, tmp_path, 1, 4)
    assert len(reference) == 2 and all(len(epoch) == 960 // GLOBAL_BATCH for epoch in reference)
    for epoch in reference:
        ids = [i for b in epoch for i in b]
        assert all(len(b) == GLOBAL_BATCH for b in epoch)
        assert Counter(i >= 10_000 for i in ids) == {False: 640, True: 320}  # exact 2:1 quotas
        assert len({i for i in ids if i < 10_000}) == 640  # the big source is not repeated
    assert reference[0] != reference[1]
    for world, workers in [(4, 1), (2, 2)]:
        assert _run(root, tmp_path, world, workers) == reference, (
            f"{world} ranks x {workers} workers"
        )
    state = str(tmp_path / "state.json")
    head = _run(root, tmp_path, 4, 1, stop=23, state=state)
    tail = _run(root, tmp_path, 2, 1, state=state)
    assert head[0] == reference[0][:23]
    assert tail[0] == reference[0][23:] and tail[1] == reference[1]
