"""HF transformers ``Trainer`` resumed on another topology (torchrun, gloo on 127.0.0.1, cpu):
another number of processes, of DataLoader workers, of both, with gradient accumulation,
from a checkpoint at an epoch's end, with evaluations over the training dataset, and from
one Trainer's checkpoint to the other (the plain ``Trainer`` and ``ShardwiseTrainer`` write
the same record). The Trainer alone would skip its step count of the new topology's
batches: other samples, and with another number of processes another epoch (hundreds of
repeats). Every epoch of the two runs together must train each sample at most once and
leave out fewer than the new cut's remainder, and no epoch may be lost."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _fwcheck import free_port, load, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_trainer.py")
ROWS = 403


def _train(
    data: str, out: Path, nproc: int, workers: int, mode: str, run_args: dict[str, Any]
) -> None:
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    cmd = ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *rdzv, SCRIPT]
    env = {"FW_WORKERS": str(workers), **run_args["env"]}
    resume = ["resume"] if "FW_CHECKPOINT" in env else []
    run([*cmd, data, str(out), mode, run_args["fmt"], str(run_args["epochs"]), *resume], env=env)


CASES = {  # first (processes, workers, mode) -> then; format; steps saved at; epochs; env
    "plain-2x2-to-1x0": ((2, 2, "plain"), (1, 0, "plain"), "samples", 27, 2, {}),
    "plain-to-shardwise-accum": (
        (1, 2, "plain"),
        (2, 1, "shardwise"),
        "numpy",
        27,
        2,
        {"FW_ACCUM": "2"},
    ),
    "shardwise-to-plain": ((2, 2, "shardwise"), (1, 2, "plain"), "torch", 27, 2, {}),
    "plain-epoch-end": ((2, 2, "plain"), (1, 1, "plain"), "numpy", 20, 3, {}),
    "shardwise-eval": ((2, 2, "shardwise"), (1, 1, "shardwise"), "numpy", 27, 2, {"FW_EVAL": "1"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_resume_on_another_topology_trains_every_epochs_rest_once(
    tmp_path: Path, case: str
) -> None:
    (n1, w1, m1), (n2, w2, m2), fmt, saved_at, epochs, env = CASES[case]
    accum = int(env.get("FW_ACCUM", "1"))
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    first = {"fmt": fmt, "epochs": epochs, "env": {**env, "FW_SAVE_STEPS": str(saved_at)}}
    _train(data, tmp_path / "a", n1, w1, m1, first)
    checkpoint = tmp_path / "a" / m1 / fmt / "run" / f"checkpoint-{saved_at}"
    assert (checkpoint / "shardwise_loader.json").is_file()
    then = {**first, "env": {**first["env"], "FW_CHECKPOINT": str(checkpoint)}}
    _train(data, tmp_path / "b", n2, w2, m2, then)
    full = load(tmp_path / "a" / m1 / fmt, m1, n1)
    resumed = load(tmp_path / "b" / m2 / fmt, "resumed", n2)
    quantum = n2 * max(1, w2) * 10  # the rest is cut again in whole batches per worker
    for epoch in range(epochs):
        steps = {sum(1 for e, _ in rec if e == epoch) for rec in resumed}
        assert len(steps) == 1, f"epoch {epoch}: unequal steps per rank {steps}"
        before = [
            i for rec in full for e, ids in rec[: saved_at * accum] if e == epoch for i in ids
        ]
        after = [i for rec in resumed for e, ids in rec if e == epoch for i in ids]
        trained = Counter(before) + Counter(after)
        repeats = sum(c - 1 for c in trained.values())
        assert not repeats, f"epoch {epoch}: {repeats} samples trained twice"
        assert set(trained) <= set(range(ROWS)) and ROWS - len(trained) < 3 + quantum, (
            f"epoch {epoch}: {len(trained)} samples trained"
        )
