"""Lightning, exact: ``Trainer(accelerator="cpu", devices=2, strategy="ddp")`` and Fabric,
2 processes on gloo, DataLoader workers, 2 epochs that advance by themselves (no
``set_epoch``), every sample once per epoch, equal steps, and a resume mid-epoch 1 through
Lightning's own checkpoint (it saves the StatefulDataLoader's state) and Fabric's."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fwcheck import check_exact, check_resume, load, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SUPPORT = Path(__file__).resolve().parents[1] / "support"
ROWS = 403  # 2 ranks x 2 workers x 10: 400 per epoch, 20 steps per rank


def test_trainer_ddp_epochs_and_a_resume_from_its_checkpoint(tmp_path: Path) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    script = str(SUPPORT / "_fw_lightning.py")
    run([script, data, str(tmp_path), "2"])
    full = load(tmp_path, "full")
    check_exact(full, ROWS, epochs=2, slack=3)
    ckpt = tmp_path / "ckpt" / "epoch=1-step=27.ckpt"  # 7 steps into epoch 1
    run([script, data, str(tmp_path), "2", str(ckpt)])
    check_resume(full, load(tmp_path, "resumed"), 27)


def test_fabric_epochs_and_a_resume_from_its_checkpoint(tmp_path: Path) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    script = str(SUPPORT / "_fw_fabric.py")
    run([script, data, str(tmp_path), "2"])
    full = load(tmp_path, "full")
    check_exact(full, ROWS, epochs=2, slack=3)
    run([script, data, str(tmp_path), "2", str(tmp_path / "state.ckpt")])
    check_resume(full, load(tmp_path, "resumed"), 27)
