"""A torch DeviceMesh with a data-parallel dimension (FSDP2/torchtitan style) on 2
processes (torchrun, gloo on 127.0.0.1): the dataset takes its dp rank and size from the
mesh, 2 DataLoader workers, 2 epochs that advance by themselves, exact; a resume through
torch.distributed.checkpoint 7 steps into epoch 1 continues exactly."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fwcheck import check_exact, check_resume, load, torchrun
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_mesh.py")
ROWS = 403


def test_mesh_dp_dimension_epochs_and_a_dcp_resume(tmp_path: Path) -> None:
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    torchrun(SCRIPT, [data, str(tmp_path), "2"])
    full = load(tmp_path, "full")
    check_exact(full, ROWS, epochs=2, slack=3)
    torchrun(SCRIPT, [data, str(tmp_path), "2", "resume"])
    check_resume(full, load(tmp_path, "resumed"), 27)
