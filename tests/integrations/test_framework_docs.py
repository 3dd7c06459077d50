"""Every page of docs/frameworks runs as written: each ```python block is saved as a script
and launched the way its first line says (2 processes: torchrun, Lightning's own launcher,
Ray Train or 2 ranks side by side), with DataLoader (or DALI) workers, over 2 epochs; the
run saves a checkpoint mid-epoch 1, and a second run resumes from it and finishes."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from _daliwds import make_shards
from _fwcheck import free_port, launch, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "frameworks"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
ROWS = 403

# page -> (script name per block, checkpoint the first run leaves behind per block)
PAGES = {
    "hf.md": [  # and checkpoint-40 next to it, removed
        ("train.py", "out/checkpoint-27"),
        ("train_shardwise.py", "out-shardwise/checkpoint-27"),
    ],
    "accelerate.md": [("train.py", "state"), ("train_shardwise.py", "state-shardwise")],
    "lightning.md": [("train.py", "ckpt/epoch=1-step=27.ckpt"), ("train_fabric.py", "state.ckpt")],
    "ray-train.md": [("train.py", "ray/shardwise")],
    "device-mesh.md": [("train.py", "dcp")],
    "dali.md": [("train.py", "dali-state-1.json")],
    "pytorch.md": [("train.py", None), ("stateful.py", None)],  # each asserts its own promise
}


def test_every_page_is_tested() -> None:
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(PAGES)
    for page, scripts in PAGES.items():
        assert len(BLOCK.findall((DOCS / page).read_text())) == len(scripts), page


def _launch(script: Path, cwd: Path) -> None:
    first = script.read_text().splitlines()[0]
    if "torchrun" in first:
        rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
        run(["-m", "torch.distributed.run", "--nproc_per_node=2", *rdzv, str(script)], cwd=cwd)
    elif "RANK=0" in first:  # two ranks side by side
        env = dict(os.environ, WORLD_SIZE="2", OMP_NUM_THREADS="1")
        launch(
            [[sys.executable, str(script)]] * 2, [env | {"RANK": str(r)} for r in range(2)], cwd=cwd
        )
    else:
        run([str(script)], cwd=cwd)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_runs_two_epochs_and_resumes(tmp_path: Path, page: str) -> None:
    if page == "dali.md":
        make_shards(tmp_path / "shards", [30, 11, 25, 30])
    else:
        make_parquet(tmp_path / "data", ROWS, files=3)
    for code, (name, checkpoint) in zip(BLOCK.findall((DOCS / page).read_text()), PAGES[page]):
        script = tmp_path / name
        script.write_text(code)
        _launch(script, tmp_path)  # 2 epochs, a checkpoint 7 batches into epoch 1
        assert checkpoint is None or (tmp_path / checkpoint).exists(), f"{page}: no {checkpoint}"
        last = (tmp_path / (checkpoint or "out/-")).parent / "checkpoint-40"
        shutil.rmtree(last, ignore_errors=True)  # as if stopped before the end
        _launch(script, tmp_path)  # resumes from it and finishes epoch 1
