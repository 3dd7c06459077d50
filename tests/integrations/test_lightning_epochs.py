"""Lightning resumed from a checkpoint saved at an epoch's end (its default
``ModelCheckpoint``) restores no loader state, one saved at an epoch's last step counts the
rest of that epoch (nothing) as the next, and Lightning tells only samplers the epoch: the
dataset takes Lightning's epoch when Lightning asks its length, so the resumed run trains
on exactly the uninterrupted run's next epoch, not on epoch 0's order again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _fwcheck import run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

SCRIPT = str(Path(__file__).resolve().parents[1] / "support" / "_fw_lightning_epochs.py")


def _steps(out: Path) -> dict[int, list[list[int]]]:
    by: dict[int, list[list[int]]] = {}
    for epoch, ids in json.loads((out / "steps.json").read_text()):
        by.setdefault(epoch, []).append(ids)
    return by


@pytest.mark.parametrize("steps", [None, "40"])  # the epoch's end; its last step (40 steps)
def test_a_resume_from_an_epoch_end_checkpoint_trains_the_next_epoch(
    tmp_path: Path, steps: str | None
) -> None:
    data = str(make_parquet(tmp_path / "data", 403, files=3))
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    env = {} if steps is None else {"STEPS": steps}
    run([SCRIPT, data, str(full)], env=env)
    whole = _steps(full)
    assert sorted(whole) == [0, 1] and whole[0] != whole[1]
    run([SCRIPT, data, str(resumed), str(full / "ckpt" / "epoch=0-step=40.ckpt")], env=env)
    assert _steps(resumed) == {1: whole[1]}
