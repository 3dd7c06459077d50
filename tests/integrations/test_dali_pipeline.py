"""Real NVIDIA DALI (CPU-only) pipelines over WebDataset tar shards, 2 ranks x 2 workers.

Each rank builds a pipeline with ``py_num_workers=2`` and two ``parallel=True`` iterable
sources (``py_start_method="spawn"``); images are decoded by ``fn.decoders.image``.
Checked: every sample exactly once per epoch across ranks x workers (drop_last), exactly
``per_worker`` samples from each source in each batch, the (rank, worker) shares
disjoint, both ranks stopping on the same iteration, two epochs in different orders
over the same set; uneven shards; and the same from a SeaweedFS S3 bucket.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _daliwds import build_pipeline, label, make_shards, run_epoch

from shardwise.integrations.dali import DaliInput

pytestmark = [pytest.mark.engine, pytest.mark.slow]

PER_WORKER = 4
WORKERS = 2
RANKS = 2


@pytest.fixture(autouse=True)
def _cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SHARDWISE_CACHE_DIR", str(tmp_path / "cache"))


def _sources(path: str, **kw: Any) -> list[DaliInput]:
    return [
        DaliInput(
            path,
            rank=r,
            world_size=RANKS,
            num_workers=WORKERS,
            per_worker=PER_WORKER,
            columns=["jpg", "cls"],
            seed=7,
            **kw,
        )
        for r in range(RANKS)
    ]


def _run(srcs: list[DaliInput], epochs: int) -> list[list[dict[str, Any]]]:
    """Per epoch, per rank: what run_epoch saw (pipelines of both ranks alive together)."""
    pipes = [build_pipeline(s) for s in srcs]
    try:
        return [[run_epoch(p, s) for p, s in zip(pipes, srcs)] for _ in range(epochs)]
    finally:
        for p in pipes:
            del p


def _check_epoch(ranks: list[dict[str, Any]], iterations: int) -> list[int]:
    """Exactly per_worker per source per batch, equal iterations, disjoint shares; returns
    the epoch's labels across ranks."""
    assert [r["iterations"] for r in ranks] == [iterations] * RANKS
    shares: list[set[int]] = []
    for r in ranks:
        for batches in r["per_source"]:
            assert len(batches) == iterations
            assert all(len(b) == PER_WORKER for b in batches)
            shares.append({x for b in batches for x in b})
        # the merged batch is source 0's samples, then source 1's, iteration by iteration
        expect = [x for i in range(iterations) for batches in r["per_source"] for x in batches[i]]
        assert r["merged"] == expect
    assert (
        sum(len(s) for s in shares)
        == len(set().union(*shares))
        == RANKS * WORKERS * PER_WORKER * iterations
    )
    return [x for r in ranks for x in r["merged"]]


def test_two_ranks_two_workers_every_sample_once_per_epoch(tmp_path: Path) -> None:
    total = make_shards(tmp_path / "wds", [24] * 6)  # 144 = 2 ranks x 2 workers x 4 x 9
    srcs = _sources(str(tmp_path / "wds"))
    assert [s.iterations for s in srcs] == [9, 9]
    epochs = _run(srcs, 2)
    seen = [_check_epoch(e, 9) for e in epochs]
    assert sorted(seen[0]) == sorted(seen[1]) == list(range(total))
    assert seen[0] != seen[1]  # a new order each epoch


def test_uneven_shards_drop_last_and_padding(tmp_path: Path) -> None:
    sizes = [1, 53, 2, 17, 9, 31]  # 113 samples: 7 iterations of 16, 1 left out
    total = make_shards(tmp_path / "wds", sizes)
    srcs = _sources(str(tmp_path / "wds"))
    assert [s.iterations for s in srcs] == [7, 7]
    (epoch,) = _run(srcs, 1)
    seen = _check_epoch(epoch, 7)
    assert len(seen) == total - 1 and set(seen) < set(range(total))

    padded = _sources(str(tmp_path / "wds"), drop_last=False)
    (epoch,) = _run(padded, 1)
    assert [r["iterations"] for r in epoch] == [8, 8]
    labels = [x for r in epoch for x in r["merged"]]
    counts = Counter(labels)
    assert set(counts) == set(range(total)) and len(labels) == 128
    assert sum(c - 1 for c in counts.values()) == 128 - total  # only the documented repeats


def test_from_the_s3_server_equals_local(
    tmp_path: Path, s3_server: dict[str, Any], bucket: tuple[str, Any]
) -> None:
    name, fs = bucket
    make_shards(tmp_path / "wds", [20, 13, 31, 8])  # 72 samples: 4 iterations of 16
    for f in sorted((tmp_path / "wds").iterdir()):
        fs.put(str(f), f"{name}/wds/{f.name}")
    local = _run(_sources(str(tmp_path / "wds")), 1)[0]
    remote_srcs = _sources(f"s3://{name}/wds/", storage_options=s3_server["storage_options"])
    remote = _run(remote_srcs, 1)[0]
    _check_epoch(remote, 4)
    assert [r["merged"] for r in remote] == [r["merged"] for r in local]


SCRIPT = """
import sys
from nvidia.dali import fn, pipeline_def  # DALI's exit handler first
mp_util_before = "multiprocessing.util" in sys.modules
from shardwise.integrations.dali import DaliInput

src = DaliInput(sys.argv[1], num_workers=2, per_worker=4, columns=["jpg", "cls"])

@pipeline_def(
    batch_size=4, num_threads=1, device_id=None, py_num_workers=2, py_start_method="spawn"
)
def pipe():
    return tuple(out for outs in src.external_sources() for out in outs)

if __name__ == "__main__":
    p = pipe()  # alive at exit: its workers must still be shut down before they are joined
    p.build()
    p.run()
    print("ran", mp_util_before)
"""


def test_a_script_with_a_live_pipeline_exits(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    make_shards(tmp_path / "wds", [20, 12])
    (tmp_path / "live.py").write_text(SCRIPT)
    out = subprocess.run(
        [sys.executable, str(tmp_path / "live.py"), str(tmp_path / "wds")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[:2] == ["ran", "False"]  # the import order that used to hang


def test_the_pytorch_iterator_and_merge_by_name(tmp_path: Path) -> None:
    from nvidia.dali import fn, pipeline_def
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    make_shards(tmp_path / "wds", [24] * 4)  # 96 = 2 ranks x 2 workers x 4 x 6
    src = DaliInput(
        str(tmp_path / "wds"),
        rank=1,
        world_size=RANKS,
        num_workers=WORKERS,
        per_worker=PER_WORKER,
        columns=["jpg"],
        seed=0,
    )

    @pipeline_def(
        batch_size=PER_WORKER,
        num_threads=1,
        device_id=None,
        py_num_workers=WORKERS,
        py_start_method="spawn",
    )
    def pipe() -> tuple[Any, ...]:
        return tuple(fn.decoders.image(jpg, device="cpu") for (jpg,) in src.external_sources())

    p = pipe()
    p.build()
    loader = DALIGenericIterator(p, src.output_names(["image"]), auto_reset=True)
    for _ in range(2):
        steps = 0
        for (out,) in loader:
            assert set(out) == {"image_w0", "image_w1"}
            merged = src.merge(out)
            assert isinstance(merged, dict) and tuple(merged["image"].shape) == (8, 8, 8, 3)
            assert (merged["image"][:PER_WORKER] == out["image_w0"]).all()
            steps += 1
        assert steps == src.iterations == 6


def test_resume_in_a_new_pipeline_continues_the_epoch(tmp_path: Path) -> None:
    make_shards(tmp_path / "wds", [30, 11, 25, 30])  # 96: 6 iterations of 16 across 2 ranks
    full_src = _sources(str(tmp_path / "wds"))[0]
    (full,) = _run([full_src], 1)[0]
    state = full_src.state_dict(iterations=2)
    resumed_src = _sources(str(tmp_path / "wds"))[0]
    resumed_src.load_state_dict(state)
    assert resumed_src.iterations == full["iterations"] - 2 == 4
    (rest,) = _run([resumed_src], 1)[0]
    assert rest["merged"] == full["merged"][2 * WORKERS * PER_WORKER :]
    assert all(b == f[2:] for b, f in zip(rest["per_source"], full["per_source"]))


def _run_some(pipe: Any, src: DaliInput, iterations: int) -> list[int]:
    """``iterations`` merged iterations (no reset): their labels."""
    merged: list[int] = []
    for _ in range(iterations):
        _, labels = src.merge(pipe.run())
        merged.extend(label(t) for t in labels)
    return merged


def test_state_names_later_epochs_and_a_resume_in_epoch_1_runs_on(tmp_path: Path) -> None:
    """The training process follows DALI's epochs: a state saved 2 iterations into epoch 1
    describes epoch 1; the resumed pipeline finishes epoch 1, then runs whole epochs 2 and 3
    (``iterations`` is each epoch's own count, as the README's loop asserts)."""
    make_shards(tmp_path / "wds", [30, 11, 25, 30])  # 96: 6 iterations of 16 across 2 ranks
    ref = _sources(str(tmp_path / "wds"))
    epochs = _run(ref, 4)  # per epoch, per rank
    assert all(e[r]["iterations"] == 6 for e in epochs for r in range(RANKS))
    assert ref[0].epoch == 3  # the epoch merged last
    srcs = _sources(str(tmp_path / "wds"))
    pipes = [build_pipeline(s) for s in srcs]
    try:
        assert [run_epoch(p, s)["merged"] for p, s in zip(pipes, srcs)] == [
            r["merged"] for r in epochs[0]
        ]
        head = [_run_some(p, s, 2) for p, s in zip(pipes, srcs)]
        states = [s.state_dict() for s in srcs]
    finally:
        for p in pipes:
            del p
    assert [s.epoch for s in srcs] == [1, 1] and [st["epoch"] for st in states] == [1, 1]
    resumed = _sources(str(tmp_path / "wds"))
    for s, st in zip(resumed, states):
        s.load_state_dict(st)
    assert [s.iterations for s in resumed] == [4, 4]
    after = _run(resumed, 3)
    for r in range(RANKS):
        assert head[r] + after[0][r]["merged"] == epochs[1][r]["merged"]  # epoch 1, exactly
        assert after[0][r]["iterations"] == 4  # the resumed epoch's remainder
        for e in (1, 2):  # then whole epochs 2 and 3, each of 6 iterations
            assert after[e][r]["merged"] == epochs[e + 1][r]["merged"]
            assert after[e][r]["iterations"] == 6
    assert [s.epoch for s in resumed] == [3, 3]
    assert epochs[1][0]["merged"] != epochs[2][0]["merged"]


def test_the_former_name_still_works_and_warns(tmp_path: Path) -> None:
    from shardwise.integrations.dali import DaliSource

    make_shards(tmp_path / "wds", [30, 11, 25, 30])
    with pytest.warns(DeprecationWarning, match="DaliInput"):
        src = DaliSource(
            str(tmp_path / "wds"),
            num_workers=2,
            per_worker=4,
            columns=["cls"],
            rank=0,
            world_size=1,
        )
    assert isinstance(src, DaliInput) and src.iterations == 12


def test_a_state_saved_at_an_epochs_end_resumes_in_the_next_epoch(tmp_path: Path) -> None:
    """A checkpoint after an epoch's last iteration (the usual place) leaves nothing of that
    epoch: the resumed sources start the next one, which DALI's iterators need (they refuse
    a pipeline whose first epoch is empty)."""
    from nvidia.dali.plugin.pytorch import DALIGenericIterator

    make_shards(tmp_path / "wds", [30, 11, 25, 30])  # 96: 6 iterations of 16 across 2 ranks
    first = _sources(str(tmp_path / "wds"))[0]
    pipe = build_pipeline(first)
    for _ in range(2):
        run_epoch(pipe, first)
    state = first.state_dict()  # after epoch 1's last iteration
    assert state["epoch"] == 1
    whole = run_epoch(pipe, first)["merged"]  # epoch 2, uninterrupted
    del pipe
    src = _sources(str(tmp_path / "wds"))[0]
    src.load_state_dict(state)
    assert (src.epoch, src.iterations) == (2, 6)
    loader = DALIGenericIterator(build_pipeline(src), src.output_names(["image", "label"]))
    merged = [label(x) for (out,) in loader for x in src.merge(out)["label"]]
    assert len(merged) == 6 * WORKERS * PER_WORKER and src.epoch == 2
    assert merged == whole
