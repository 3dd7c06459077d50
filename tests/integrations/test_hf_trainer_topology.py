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


@pytest.mark.parametrize("mode", ["plain", "shardwise"])
def test_a_resume_on_fewer_processes_trains_up_to_max_steps(tmp_path: Path, mode: str) -> None:
    """``max_steps=50`` on 2 processes (20 steps an epoch), a checkpoint at step 45 (5 steps
    into epoch 2), resumed on 1 process (40 steps an epoch): there the Trainer counts
    ``max_steps`` as 2 epochs, so it trained nothing from epoch 2 and ended at step 45. It
    trains the 5 steps left, on samples of epoch 2 that the first run had not trained."""
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    first = {"fmt": "numpy", "epochs": 3, "env": {"FW_MAX_STEPS": "50", "FW_SAVE_STEPS": "45"}}
    _train(data, tmp_path / "a", 2, 2, mode, first)
    checkpoint = tmp_path / "a" / mode / "numpy" / "run" / "checkpoint-45"
    then = {**first, "env": {**first["env"], "FW_CHECKPOINT": str(checkpoint)}}
    _train(data, tmp_path / "b", 1, 2, mode, then)
    full = load(tmp_path / "a" / mode / "numpy", mode, 2)
    (resumed,) = load(tmp_path / "b" / mode / "numpy", "resumed", 1)
    assert [e for e, _ in resumed] == [2] * 5
    before = {i for rec in full for e, ids in rec[:45] if e == 2 for i in ids}
    after = [i for _, ids in resumed for i in ids]
    assert len(before) == 100 and len(set(after)) == 50 and not before & set(after)
