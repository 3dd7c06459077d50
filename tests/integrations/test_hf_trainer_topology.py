"""HF transformers ``Trainer`` resumed on another topology (torchrun, gloo on 127.0.0.1, cpu):
another number of processes, of DataLoader workers, of both, with gradient accumulation,
and from one Trainer's checkpoint to the other (the plain ``Trainer`` and
``ShardwiseTrainer`` write the same record). The Trainer alone would skip its step count of
the new topology's batches: other samples, and with another number of processes another
epoch (hundreds of repeats). The resumed epoch must train every sample the checkpoint had
not, once, and nothing it had."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from _fwcheck import free_port, load, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_trainer.py")
ROWS = 403
SAVED_AT = 27  # the checkpoint's optimizer step: in epoch 1 of every first run below


def _train(data: str, out: Path, nproc: int, workers: int, mode: str, fmt: str, **env: str) -> None:
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    cmd = ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *rdzv, SCRIPT]
    resume = ["resume"] if "FW_CHECKPOINT" in env else []
    run([*cmd, data, str(out), mode, fmt, "2", *resume], env={"FW_WORKERS": str(workers), **env})


@pytest.mark.parametrize(
    ("first", "then", "fmt", "accum"),
    [
        pytest.param((2, 2, "plain"), (1, 0, "plain"), "samples", 1, id="plain-2x2-to-1x0"),
        pytest.param((1, 2, "plain"), (2, 1, "shardwise"), "numpy", 2, id="plain-to-shardwise"),
        pytest.param((2, 2, "shardwise"), (1, 2, "plain"), "torch", 1, id="shardwise-to-plain"),
    ],
)
def test_a_resume_on_another_topology_trains_the_epochs_rest_once(
    tmp_path: Path, first: tuple[int, int, str], then: tuple[int, int, str], fmt: str, accum: int
) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    (n1, w1, m1), (n2, w2, m2) = first, then
    _train(data, tmp_path / "a", n1, w1, m1, fmt, FW_ACCUM=str(accum))
    checkpoint = tmp_path / "a" / m1 / fmt / "run" / f"checkpoint-{SAVED_AT}"
    assert (checkpoint / "shardwise_loader.json").is_file()
    _train(
        data, tmp_path / "b", n2, w2, m2, fmt, FW_ACCUM=str(accum), FW_CHECKPOINT=str(checkpoint)
    )
    full = load(tmp_path / "a" / m1 / fmt, m1, n1)
    resumed = load(tmp_path / "b" / m2 / fmt, "resumed", n2)
    assert {e for rec in resumed for e, _ in rec} == {1}, "the rest of epoch 1 only"
    steps = {len(rec) for rec in resumed}
    assert len(steps) == 1 and steps.pop() > 0, "equal steps on every rank"
    before = [i for rec in full for e, ids in rec[: SAVED_AT * accum] if e == 1 for i in ids]
    after = [i for rec in resumed for _, ids in rec for i in ids]
    trained = Counter(before) + Counter(after)
    repeats = {i: c for i, c in trained.items() if c > 1}
    assert not repeats, f"{len(repeats)} samples trained twice in epoch 1"
    epoch = {i for rec in full for e, ids in rec if e == 1 for i in ids}
    quantum = n2 * max(1, w2) * 10  # the rest is cut again in whole batches per worker
    assert set(trained) <= epoch and len(epoch) - len(trained) < quantum, (len(trained), quantum)
