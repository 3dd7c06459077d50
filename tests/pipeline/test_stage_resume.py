"""A stage's intermediate files and marker are written without fsync: a rerun trusts them
only when the marker is whole and the files are as long as it says, and otherwise redoes
the stage (what a power loss can leave), with the same output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _pipeline_common import make_input
from _tasks import fail_after_marker

from shardwise.pipeline import Pipeline, read_jsonl


def _pipeline(src: Path, out: Path, marker_dir: Path) -> Pipeline:
    return (
        read_jsonl(str(src), task_bytes=40_000)
        .dedup("minhash", column="text", num_perm=32)
        .map(fail_after_marker, marker_dir=str(marker_dir))
        .write_parquet(str(out))
    )


def test_a_rerun_redoes_a_stage_whose_marker_or_files_are_cut_short(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=2, rows=600)
    ref = _pipeline(src, tmp_path / "ref", tmp_path).run(backend="sequential", progress=False)
    (tmp_path / "fail").touch()
    with pytest.raises(RuntimeError, match="simulated failure"):
        _pipeline(src, tmp_path / "out", tmp_path).run(backend="sequential", progress=False)
    stage = tmp_path / ".out.shardwise-partial" / "_work" / "s0"
    markers = sorted(stage.glob("task-*.done.json"))
    assert len(markers) == ref.tasks >= 3
    assert (
        json.loads(markers[0].read_text())["stage_bytes"]["arrow"]
        == (stage / "task-00000.arrow").stat().st_size
    )
    arrow = stage / "task-00000.arrow"
    arrow.write_bytes(arrow.read_bytes()[:-7])  # files shorter than the marker says
    markers[1].write_text(markers[1].read_text()[:20])  # a marker cut short
    keys = stage / "task-00002.keys.npz"
    keys.write_bytes(keys.read_bytes()[: keys.stat().st_size // 2])
    (tmp_path / "fail").unlink()
    again = _pipeline(src, tmp_path / "out", tmp_path).run(backend="sequential", progress=False)
    assert again.rows_out == ref.rows_out < 1200
    assert {p.name: p.read_bytes() for p in (tmp_path / "out").glob("part-*")} == {
        p.name: p.read_bytes() for p in (tmp_path / "ref").glob("part-*")
    }
