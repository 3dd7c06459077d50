"""Model-parallel groups in a real torch.distributed run: gloo on 127.0.0.1, 4 ranks,
DataLoader(num_workers=2); 2 groups of 2 (``replication=2``), a resume onto 4 groups of 1,
and a ``DeviceMesh`` with a named data-parallel dimension."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from _loaderdata import make_parquet

N, BATCH, WORKERS = 3_001, 16, 2
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "support", "_repl_worker.py")

pytestmark = pytest.mark.engine


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _launch(tmp_path: Path, data: Path, phase: str) -> Any:
    """Run the 4 ranks of one phase like torchrun does; what rank 0 gathered."""
    out, port, procs = tmp_path / f"{phase}.json", _free_port(), []
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
                [sys.executable, SCRIPT, str(data), str(out), phase, str(tmp_path / "state.pt")],
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
    return json.loads(out.read_text())


def _check_groups(steps: list[list[list[int]]], repl: int) -> list[int]:
    """Every step: the ranks of a group hold identical batches, groups share nothing.
    Returns the ids the groups read (each group once)."""
    ids: list[int] = []
    for step, ranks in enumerate(steps):
        for r, batch in enumerate(ranks):
            assert batch == ranks[r - r % repl], (
                f"step {step}: rank {r} differs from its group's first rank"
            )
            assert len(batch) == BATCH
        ids += [i for g in range(0, len(ranks), repl) for i in ranks[g]]
    return ids


def test_two_groups_of_two_then_resume_onto_four_groups_of_one(tmp_path: Path) -> None:
    data = make_parquet(tmp_path / "ds", N)
    first = _launch(tmp_path, data, "groups")
    assert first["dp"] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    epoch0 = _check_groups(first["epoch0"], 2)
    assert len(epoch0) == len(set(epoch0)), "two groups shared a sample in epoch 0"
    assert N - len(epoch0) < 2 * WORKERS * BATCH and len(first["epoch0"]) == len(epoch0) // (
        2 * BATCH
    )
    assert first["same_state"], "ranks of the groups saved different states"
    head = _check_groups(first["head"], 2)
    assert len(first["head"]) == 9
    second = _launch(tmp_path, data, "resume")
    assert second["dp"] == [[r, 4] for r in range(4)]
    tail = _check_groups(second["tail"], 1)
    epoch1 = head + tail
    assert len(epoch1) == len(set(epoch1)), "a sample was repeated across the resume"
    assert N - len(epoch1) < (2 + 4) * WORKERS * BATCH
    assert epoch1[: len(head)] != epoch0[: len(head)]  # epoch 1 is a new order


def test_device_mesh_data_parallel_dimension_by_name(tmp_path: Path) -> None:
    data = make_parquet(tmp_path / "ds", N)
    got = _launch(tmp_path, data, "mesh")
    # mesh [[0, 1], [2, 3]]: "dp" first groups ranks (0, 1) and (2, 3); "dp" second (0, 2)
    # and (1, 3)
    assert got["dptp"]["dp"] == [[0, 2], [0, 2], [1, 2], [1, 2]]
    assert got["tpdp"]["dp"] == [[0, 2], [1, 2], [0, 2], [1, 2]]
    for step in got["dptp"]["steps"]:
        assert step[0] == step[1] != step[2] == step[3]
        assert not set(step[0]) & set(step[2])
    for a, b in zip(got["dptp"]["steps"], got["tpdp"]["steps"], strict=True):
        assert b[0] == b[2] == a[0] and b[1] == b[3] == a[2]  # the same plan, other ranks
    assert got["flat"] == [[r, 4] for r in range(4)]
    assert got["errors"] == {
        "{'dp_dim': 'pp'}": (
            "dp_dim='pp' is not a dimension of device_mesh= (its dimensions: ['tp', 'dp'])"
        ),
        "{}": (
            "device_mesh= has 2 dimensions ('tp', 'dp'); pass dp_dim= naming the data-parallel one"
        ),
        "{'dp_dim': 2}": "dp_dim must name a dimension of device_mesh= (['tp', 'dp']), got 2",
    }
