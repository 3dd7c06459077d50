"""A real torch.distributed run: gloo on 127.0.0.1, 4 ranks, DataLoader(num_workers=2)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from _loaderdata import make_parquet

N = 10_007


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.engine
def test_ddp_four_ranks_two_epochs_equal_steps_no_repeats(tmp_path: Path) -> None:
    data = make_parquet(tmp_path / "ds", N)
    out = tmp_path / "report.json"
    script = os.path.join(os.path.dirname(__file__), "..", "support", "_ddp_worker.py")
    port = _free_port()
    procs = []
    for rank in range(4):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE="4",
            LOCAL_RANK=str(rank),
            LOCAL_WORLD_SIZE="4",
            GLOO_SOCKET_IFNAME="lo",
            SHARDWISE_CACHE_DIR=str(tmp_path / "cache"),
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, script, str(data), str(out)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    try:
        outputs = [p.communicate(timeout=300)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), "\n".join(outputs)
    report = json.loads(out.read_text())
    assert len(report) == 2
    epochs = []
    for gathered in report:
        steps = {g["steps"] for g in gathered}
        assert len(steps) == 1, (
            f"ranks did different numbers of steps: {[g['steps'] for g in gathered]}"
        )
        ids = [i for g in gathered for i in g["ids"]]
        assert len(ids) == len(set(ids)), "a sample was read twice in one epoch"
        assert N - len(ids) < 4 * 2 * 16
        epochs.append(ids)
    assert epochs[0] != epochs[1]  # a new order each epoch
