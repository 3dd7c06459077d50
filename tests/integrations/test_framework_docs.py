"""Every page of docs/frameworks runs as written: each ```python block is saved as a script
and launched the way its first line says (2 processes: torchrun, Lightning's own launcher,
Ray Train or 2 ranks side by side), with DataLoader (or DALI) workers, over 2 epochs; the
run saves a checkpoint mid-epoch 1, and a second run resumes from it and finishes.

On the pages whose scripts train a model with torch's DDP (every page but DALI's and plain
PyTorch's, whose scripts assert their own promises), the ids each rank's model trains on
are recorded from outside the script (``support/steps/sitecustomize.py``): both epochs are
exact, and the resumed run trains on exactly what the first run trained on after step 27.
The plain HF Trainer's, Accelerate's and Lightning's first scripts resume once more from
their checkpoint on one process: the rest of epoch 1, every sample once."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from _daliwds import make_shards
from _fwcheck import Record, check_exact, check_resume, free_port, launch, run
from _loaderdata import make_parquet

pytestmark = [pytest.mark.engine, pytest.mark.slow]

DOCS = Path(__file__).resolve().parents[2] / "docs" / "frameworks"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
ROWS = 403
STEPS = Path(__file__).resolve().parents[1] / "support" / "steps"  # the recorder
AT_STEP = 27  # the pages' checkpoint: 7 batches into epoch 1

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
RECORDED = {"hf.md", "accelerate.md", "lightning.md", "ray-train.md", "device-mesh.md"}
# resumed once more on 1 process from the same checkpoint (Lightning's script with devices=1)
ELSEWHERE = {("hf.md", "train.py"), ("accelerate.md", "train.py"), ("lightning.md", "train.py")}


def test_every_page_is_tested() -> None:
    assert sorted(p.name for p in DOCS.glob("*.md")) == sorted(PAGES)
    for page, scripts in PAGES.items():
        assert len(BLOCK.findall((DOCS / page).read_text())) == len(scripts), page


def _launch(script: Path, cwd: Path, steps: Path | None, nproc: int = 2) -> None:
    """Run ``script`` as its first line says (torchrun: on ``nproc`` processes); with
    ``steps``, record each rank's steps there."""
    env: dict[str, str] = {}
    if steps is not None:
        steps.mkdir()
        path = os.pathsep.join(p for p in (str(STEPS), os.environ.get("PYTHONPATH")) if p)
        env = {"SWTEST_STEPS": str(steps), "PYTHONPATH": path}
    first = script.read_text().splitlines()[0]
    if "torchrun" in first:
        rdzv = ["--master_addr=127.0.0.1", f"--master_port={free_port()}"]
        run(
            ["-m", "torch.distributed.run", f"--nproc_per_node={nproc}", *rdzv, str(script)],
            env=env,
            cwd=cwd,
        )
    elif "RANK=0" in first:  # two ranks side by side
        env = dict(os.environ, WORLD_SIZE="2", OMP_NUM_THREADS="1") | env
        launch(
            [[sys.executable, str(script)]] * 2, [env | {"RANK": str(r)} for r in range(2)], cwd=cwd
        )
    else:
        run([str(script)], env=env, cwd=cwd)


def _recorded(steps: Path, ranks: int = 2) -> list[list[list[int]]]:
    """Per rank, the ids of each step the recorder saw, in order (one process per rank)."""
    seen: list[list[list[int]]] = [[] for _ in range(ranks)]
    owner: dict[int, str] = {}
    for f in sorted(steps.glob("*.jsonl")):
        for line in f.read_text().splitlines():
            step = json.loads(line)
            assert owner.setdefault(step["rank"], f.name) == f.name, f"rank {step['rank']} twice"
            seen[step["rank"]].append(step["ids"])
    return seen


def _by_epoch(seen: list[list[list[int]]], per_epoch: int, first: int = 0) -> list[Record]:
    """``seen`` as the framework tests' records: step ``first + k`` is in epoch
    ``(first + k) // per_epoch``."""
    return [[[(first + k) // per_epoch, ids] for k, ids in enumerate(rank)] for rank in seen]


def _check_recorded(full_steps: Path, resumed_steps: Path, what: str) -> None:
    full = _recorded(full_steps)
    lengths = {len(rank) for rank in full}
    assert len(lengths) == 1 and min(lengths) % 2 == 0, f"{what}: steps per rank {lengths}"
    per_epoch = lengths.pop() // 2
    assert per_epoch > AT_STEP - per_epoch > 0, f"{what}: {per_epoch} steps an epoch"
    records = _by_epoch(full, per_epoch)
    check_exact(records, ROWS, epochs=2, slack=3, what=what)
    resumed = _by_epoch(_recorded(resumed_steps), per_epoch, first=AT_STEP)
    check_resume(records, resumed, AT_STEP, what=what)


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_runs_two_epochs_and_resumes(tmp_path: Path, page: str) -> None:
    if page == "dali.md":
        make_shards(tmp_path / "shards", [30, 11, 25, 30])
    else:
        make_parquet(tmp_path / "data", ROWS, files=3)
    for code, (name, checkpoint) in zip(BLOCK.findall((DOCS / page).read_text()), PAGES[page]):
        script = tmp_path / name
        script.write_text(code)
        steps = [tmp_path / f"steps-{name}-{run}" if page in RECORDED else None for run in (1, 2)]
        _launch(script, tmp_path, steps[0])  # 2 epochs, a checkpoint 7 batches into epoch 1
        assert checkpoint is None or (tmp_path / checkpoint).exists(), f"{page}: no {checkpoint}"
        last = (tmp_path / (checkpoint or "out/-")).parent / "checkpoint-40"
        shutil.rmtree(last, ignore_errors=True)  # as if stopped before the end
        _launch(script, tmp_path, steps[1])  # resumes from it and finishes epoch 1
        if page == "hf.md":  # the Trainer's own epoch count, through the resumed epoch too
            epoch = json.loads((last / "trainer_state.json").read_text())["epoch"]
            assert epoch == 2.0, f"{name}: the last checkpoint says epoch {epoch}"
        if steps[0] is not None and steps[1] is not None:
            _check_recorded(steps[0], steps[1], f"{page} {name}")
        if (page, name) in ELSEWHERE and steps[0] is not None:
            shutil.rmtree(last, ignore_errors=True)
            one = tmp_path / f"one-{name}"
            one.write_text(code.replace("devices=2", "devices=1"))
            _launch(one, tmp_path, tmp_path / f"steps-{name}-1proc", nproc=1)
            _check_elsewhere(steps[0], tmp_path / f"steps-{name}-1proc", f"{page} {name}")


def _check_elsewhere(full_steps: Path, resumed_steps: Path, what: str) -> None:
    """The resume on one process trains epoch 1's rest: every sample the checkpoint had
    not trained once, none it had, at most a batch per worker short of it (the rest is
    cut again in whole batches: 1 process x 2 workers x 10)."""
    full = _recorded(full_steps)
    per_epoch = len(full[0]) // 2
    before = [i for rank in full for ids in rank[per_epoch:AT_STEP] for i in ids]
    after = [i for ids in _recorded(resumed_steps, ranks=1)[0] for i in ids]
    epoch = {i for rank in full for ids in rank[per_epoch:] for i in ids}
    trained = before + after
    assert len(trained) == len(set(trained)), f"{what}: {len(trained) - len(set(trained))} twice"
    assert set(trained) <= epoch and len(epoch) - len(trained) < 20, (what, len(trained))


def _write_steps(d: Path, ranks: list[list[list[int]]]) -> Path:
    d.mkdir()
    for rank, steps in enumerate(ranks):
        lines = [json.dumps({"rank": rank, "ids": ids}) for ids in steps]
        (d / f"{100 + rank}.jsonl").write_text("".join(line + "\n" for line in lines))
    return d


def test_the_recorded_check_fails_on_a_wrong_run(tmp_path: Path) -> None:
    import random

    order = [random.Random(e).sample(range(400), 400) for e in range(2)]
    full = [
        [order[e][(2 * s + r) * 10 : (2 * s + r + 1) * 10] for e in range(2) for s in range(20)]
        for r in range(2)
    ]
    good = _write_steps(tmp_path / "full", full)
    _check_recorded(good, _write_steps(tmp_path / "ok", [f[AT_STEP:] for f in full]), "ok")
    wrong = {
        "one step short": [f[AT_STEP + 1 :] for f in full],
        "from the epoch's start": [f[20:] for f in full],
    }
    for what, resumed in wrong.items():
        with pytest.raises(AssertionError):
            _check_recorded(good, _write_steps(tmp_path / what.replace(" ", "-"), resumed), what)
    twice = [full[0], full[1][:20] + full[1][:20]]  # rank 1 sees its first epoch twice
    with pytest.raises(AssertionError, match="repeats|order"):
        _check_recorded(_write_steps(tmp_path / "twice", twice), good, "twice")
