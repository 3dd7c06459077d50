"""Lightning resumed from a checkpoint saved at an epoch's end (its default
``ModelCheckpoint``) restores no loader state, one saved at an epoch's last step counts the
rest of that epoch (nothing) as the next, and Lightning tells only samplers the epoch: the
dataset (or a ShardwiseLoader) takes Lightning's epoch when Lightning's fit loop asks its
length as it sets up, so the resumed run trains on exactly the uninterrupted run's next
epoch, not on epoch 0's order again. A validation over the training dataset asks its
length too, and leaves the epoch be."""

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


@pytest.mark.parametrize("loader", ["stateful", "shardwise"])
@pytest.mark.parametrize("steps", [None, "40"])  # the epoch's end; its last step (40 steps)
def test_a_resume_from_an_epoch_end_checkpoint_trains_the_next_epoch(
    tmp_path: Path, steps: str | None, loader: str
) -> None:
    data = str(make_parquet(tmp_path / "data", 403, files=3))
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    env = {"LOADER": loader} | ({} if steps is None else {"STEPS": steps})
    run([SCRIPT, data, str(full)], env=env)
    whole = _steps(full)
    assert sorted(whole) == [0, 1] and whole[0] != whole[1]
    run([SCRIPT, data, str(resumed), str(full / "ckpt" / "epoch=0-step=40.ckpt")], env=env)
    assert _steps(resumed) == {1: whole[1]}


def test_a_validation_over_the_training_dataset_streams_whole_epochs(tmp_path: Path) -> None:
    """Every 7 training steps Lightning validates on a DataLoader over the training dataset
    and asks its length: each validation is a whole epoch of the dataset, every sample
    once, and the training epochs stay exact in new orders (Lightning's epoch was once set
    on the dataset then, as the validation's workers started: 49 repeats in a validation)."""
    data = str(make_parquet(tmp_path / "data", 403, files=3))
    run([SCRIPT, data, str(tmp_path)], env={"VAL": "7", "LOADER": "shardwise"})
    whole = _steps(tmp_path)
    for epoch in (0, 1):  # 403 rows: 3 left out of each epoch
        ids = [i for ids in whole[epoch] for i in ids]
        assert len(set(ids)) == len(ids) == 400, f"epoch {epoch}: {len(set(ids))} samples"
    assert whole[0] != whole[1]
    vals = json.loads((tmp_path / "val.json").read_text())
    assert len(vals) == 10 * 40  # 5 validations an epoch, 40 batches each
    for k in range(10):
        ids = [i for ids in vals[40 * k : 40 * (k + 1)] for i in ids]
        assert len(set(ids)) == len(ids) == 400, f"validation {k}: {len(set(ids))} samples"


def test_a_resume_with_validations_over_the_training_dataset_continues_exactly(
    tmp_path: Path,
) -> None:
    """A ShardwiseLoader's checkpoint at step 28, where a validation over the training
    dataset runs too: resumed, Lightning runs that validation first, and the training
    trains exactly what the uninterrupted run trained after step 28, in both epochs (the
    validation once took the loaded position, and the training restarted epoch 0 with 91
    repeats; the validations' passes moved the later epochs to other orders)."""
    data = str(make_parquet(tmp_path / "data", 403, files=3))
    env = {"VAL": "7", "LOADER": "shardwise", "STEPS": "28"}
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run([SCRIPT, data, str(full)], env=env)
    run([SCRIPT, data, str(resumed), str(full / "ckpt" / "epoch=0-step=28.ckpt")], env=env)
    whole = json.loads((full / "steps.json").read_text())
    assert len(whole) == 80
    assert json.loads((resumed / "steps.json").read_text()) == whole[28:]
