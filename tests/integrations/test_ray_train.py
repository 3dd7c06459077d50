"""Ray Train ``TorchTrainer``, 2 workers (gloo on the local node), 2 DataLoader workers
each, ``set_epoch`` per epoch as Ray's docs do: exact epochs in new orders, and a run
resumed from the checkpoint reported 7 steps into epoch 1 continues exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fwcheck import check_exact, check_resume, load, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_ray.py")
ROWS = 403


def test_torch_trainer_epochs_and_a_resume_from_its_checkpoint(tmp_path: Path) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    run([SCRIPT, data, str(tmp_path), "2"])
    full = load(tmp_path, "full")
    check_exact(full, ROWS, epochs=2, slack=3)
    run([SCRIPT, data, str(tmp_path), "2", "resume"])
    check_resume(full, load(tmp_path, "resumed"), 27)
