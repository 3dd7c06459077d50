"""The demo behind `make demo` and the framework example keep working."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_the_real_pipeline_and_equal_ranks(tmp_path: Path) -> None:
    env = dict(
        os.environ,
        SHARDWISE_DEMO_DIR=str(tmp_path / "demo"),
        SHARDWISE_CACHE_DIR=str(tmp_path / "c"),
    )
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "rows in" in out.stdout and "2,225" in out.stdout
    assert "unaccounted (must be 0)                              0" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last == f"report: {(tmp_path / 'demo' / 'clean' / '_report.html').resolve()}"
    assert 0 < Path(last.split(": ", 1)[1]).stat().st_size < 2 * 2**20
    steps = [
        line.split(":")[1].strip()
        for line in out.stdout.splitlines()
        if line.strip().startswith("rank ")
    ]
    assert len(steps) == 4 and len(set(steps)) == 1
    # the "next:" hint's commands run as printed (no shardwise on PATH: the venv's own script)
    lines = out.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("next: "))
    hints = [lines[start].removeprefix("next: ").strip(), lines[start + 1].strip()]
    assert [h.split()[1] for h in hints] == ["inspect", "plan"]
    for hint in hints:
        ran = subprocess.run(
            shlex.split(hint),
            capture_output=True,
            text=True,
            env=dict(env, PATH="/usr/bin:/bin"),
            timeout=300,
            cwd=tmp_path,
        )
        assert ran.returncode == 0 and ran.stdout.strip(), (hint, ran.stderr[-2000:])
    assert (tmp_path / "plan.html").stat().st_size > 0
    frame = subprocess.run(
        [
            sys.executable,
            str(ROOT / "examples" / "framework_loops.py"),
            str(tmp_path / "demo" / "clean"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert frame.returncode == 0, frame.stderr[-3000:]
    assert "steps per rank over 2 epochs" in frame.stdout


@pytest.mark.engine
def test_dali_example_streams_every_sample_once_per_epoch(tmp_path: Path) -> None:
    env = dict(os.environ, SHARDWISE_CACHE_DIR=str(tmp_path / "c"))
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "dali_webdataset.py"), "--per-worker", "4"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    ranks = [line for line in lines if line.startswith("rank ")]
    assert len(ranks) == 4 and len({line.split(": ", 1)[1] for line in ranks}) == 1, ranks
    assert "11 iterations of 8 (2 workers x 4), images (8, 8, 3)" in ranks[0]
    for epoch in range(2):
        assert (
            f"epoch {epoch}: 176 samples, each once: True, left out by drop_last: 0 of 176" in lines
        )
    assert "a new order each epoch: True" in lines
