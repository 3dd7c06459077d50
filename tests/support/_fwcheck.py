"""Checks shared by the framework tests: what each rank trained on, step by step.

A run's record is, per rank, a list of ``[epoch, ids]`` (one entry per training step)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

Record = list[list[Any]]  # per step: [epoch, [ids]]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run(
    args: list[str], env: dict[str, str] | None = None, timeout: int = 400, cwd: Path | None = None
) -> str:
    """Run a script with the venv's Python; its output, failing the test on an error."""
    base = dict(os.environ, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo", MASTER_ADDR="127.0.0.1")
    p = subprocess.run(
        [sys.executable, *args],
        env=base | (env or {}),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
    )
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-8000:]
    return p.stdout


def torchrun(script: str, args: list[str], nproc: int = 2, timeout: int = 400) -> str:
    """Run ``script`` on ``nproc`` local ranks with torchrun (gloo on 127.0.0.1)."""
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return run(
        ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *rdzv, script, *args],
        timeout=timeout,
    )


def load(out: Path, tag: str, ranks: int = 2) -> list[Record]:
    return [json.loads((out / f"{tag}-{r}.json").read_text()) for r in range(ranks)]


def epochs_of(records: list[Record]) -> dict[int, list[list[int]]]:
    """Per epoch, per rank: the ids trained on in order."""
    out: dict[int, list[list[int]]] = {}
    for r, rec in enumerate(records):
        for epoch, ids in rec:
            out.setdefault(int(epoch), [[] for _ in records])[r].extend(int(i) for i in ids)
    return out


def check_exact(records: list[Record], rows: int, epochs: int, slack: int) -> list[list[int]]:
    """Every epoch: equal steps on every rank, no sample twice, at most ``slack`` left out
    (the documented remainder); epochs in different orders. Returns each epoch's ids."""
    by_epoch = epochs_of(records)
    assert sorted(by_epoch) == list(range(epochs)), sorted(by_epoch)
    steps = [[sum(1 for e, _ in rec if e == epoch) for rec in records] for epoch in by_epoch]
    assert all(len(set(s)) == 1 for s in steps), f"unequal steps per rank: {steps}"
    flat = []
    for epoch in range(epochs):
        ids = [i for rank in by_epoch[epoch] for i in rank]
        assert len(ids) == len(set(ids)), f"epoch {epoch}: {len(ids) - len(set(ids))} repeats"
        assert set(ids) <= set(range(rows)) and rows - len(ids) <= slack, (epoch, len(ids))
        flat.append(ids)
    assert all(a != b for a, b in zip(flat, flat[1:])), "an epoch repeated the last one's order"
    return flat


def check_resume(full: list[Record], resumed: list[Record], at_step: int) -> None:
    """The resumed run trains on exactly what the full run trained on after ``at_step``."""
    for f, r in zip(full, resumed):
        assert [[e, list(i)] for e, i in f[at_step:]] == [[e, list(i)] for e, i in r]
