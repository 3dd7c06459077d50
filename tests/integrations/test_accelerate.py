"""HF Accelerate, 2 processes (torchrun, gloo on 127.0.0.1, cpu), DataLoader workers.

The obvious code, ``accelerator.prepare(model, opt, DataLoader(ds, ...))``, is exact for
numpy, torch and per-sample batches over 2 epochs with accelerate's default configuration
(dispatch: rank 0 serves the whole epoch) and with ``dispatch_batches=False`` (each rank
serves its own items where IterableDatasetShard keeps them); ``save_state`` after 27 steps,
``load_state`` and ``skip_first_batches`` continue exactly. A ``ShardwiseLoader`` is exact
too, and ``save_state`` / ``load_state`` alone resume it 7 steps into epoch 1."""

from __future__ import annotations

from pathlib import Path

import pytest
from _fwcheck import check_modes, free_port, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_accelerate.py")
ROWS = 403  # 2 ranks x 2 workers x 10: 400 per epoch, 20 steps per rank
FORMATS = ["numpy", "torch", "samples"]
MODES = ["plain", "nodispatch", "loader"]


def _torchrun(args: list[str]) -> str:
    rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
    return run(["-m", "torch.distributed.run", "--nproc_per_node=2", *rdzv, SCRIPT, *args])


def test_prepared_loader_is_exact_and_resumes_through_save_state(tmp_path: Path) -> None:
    """Each mode and format in turn in the same two processes (a new Accelerator, model and
    loader each): the processes' start, torch's and accelerate's imports, is paid once per
    run."""
    data = str(make_parquet(tmp_path / "ds", ROWS, files=3))
    check_modes(_torchrun, data, tmp_path, MODES, FORMATS, ROWS)
