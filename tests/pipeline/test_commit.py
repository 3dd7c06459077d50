"""The output of a run appears whole or not at all (local and object-store layouts), a
rerun finishes it, and ``_work/`` is gone after success."""

from __future__ import annotations

import json
import tempfile
import threading
from pathlib import Path

import fsspec
import pyarrow.dataset as pads
import pytest
from _pipeline_common import build, make_input
from _tasks import fail_after_marker

import shardwise
from shardwise import ConfigError, EmptyDatasetError, FormatError, StorageError
from shardwise.cli import main
from shardwise.pipeline import read_jsonl, resplit
from shardwise.pipeline.commit import CLEANUP_THREAD, TRASH
from shardwise.preparing import prepare


def _with_failure(src: Path, out: str, marker_dir: Path) -> shardwise.pipeline.Pipeline:
    return (
        read_jsonl(str(src), task_bytes=40_000)
        .map(fail_after_marker, marker_dir=str(marker_dir))
        .apply("word_count_filter", column="text", min=3)
        .write_parquet(out, target_shard_bytes=20_000)
    )


def _contents(fs: fsspec.AbstractFileSystem, root: str) -> dict[str, bytes]:
    root = root.rstrip("/")
    return {p[len(root) + 1 :]: fs.cat_file(p) for p in fs.find(root) if "/_work/" not in p}


def test_success_publishes_everything_and_removes_work(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=2, rows=600)
    out = tmp_path / "out"
    result = build(str(src), str(out)).run(backend="sequential", progress=False)
    assert not (out / "_work").exists() and not (tmp_path / ".out.shardwise-partial").exists()
    manifest = json.loads((out / "_manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} == {p.name for p in out.glob("part-*.parquet")}
    assert len(list((out / "_manifests").glob("task-*.json"))) == result.tasks
    assert pads.dataset(str(out)).count_rows() == result.rows_out


def test_staging_files_are_deleted_after_publication_and_leftovers_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        tempfile, "tempdir", str(temp := tmp_path / "temp")
    )  # where staging goes to be deleted
    src = make_input(tmp_path / "in", files=2, rows=600)
    stale = temp / f"{TRASH}left-by-a-killed-run"
    (stale / "s0").mkdir(parents=True)
    (stale / "s0" / "task-00000.arrow").write_bytes(b"x" * 1000)
    build(str(src), str(out := tmp_path / "out")).run(backend="sequential", progress=False)
    assert not stale.exists()  # removed when the run began
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in",
        "out",
        "temp",
    ]  # nothing beside the output
    for t in threading.enumerate():  # the published run's staging files go on a background thread
        if t.name == CLEANUP_THREAD:
            t.join(30)
    assert list(temp.iterdir()) == []
    assert pads.dataset(str(out)).count_rows() > 0


def test_a_failed_local_run_leaves_nothing_and_a_rerun_finishes_it(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=3, rows=800)
    ref = _with_failure(src, str(tmp_path / "ref"), tmp_path).run(
        backend="sequential", progress=False
    )
    out = tmp_path / "out"
    (tmp_path / "fail").touch()
    with pytest.raises(RuntimeError, match="simulated failure"):
        _with_failure(src, str(out), tmp_path).run(backend="sequential", progress=False)
    assert not out.exists()  # readers (shardwise, pyarrow, pandas) find nothing at all
    with pytest.raises(EmptyDatasetError):
        shardwise.index_dataset(str(out))
    (tmp_path / "fail").unlink()
    again = _with_failure(src, str(out), tmp_path).run(backend="local", progress=False)
    assert again.rows_out == ref.rows_out
    assert {p.name: p.read_bytes() for p in out.glob("part-*")} == {
        p.name: p.read_bytes() for p in (tmp_path / "ref").glob("part-*")
    }


def test_an_unfinished_object_store_output_is_refused_then_published(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=3, rows=800)
    fs = fsspec.filesystem("memory")
    out = "memory://bucket/commit-test/out"
    (tmp_path / "fail").touch()
    with pytest.raises(RuntimeError):
        _with_failure(src, out, tmp_path).run(backend="sequential", progress=False)
    visible = [p for p in fs.find("/bucket/commit-test/out") if "/_work/" not in p]
    assert visible == []  # unfinished files only under _work/, which readers skip
    with pytest.raises(StorageError, match="unfinished"):
        shardwise.index_dataset(out)
    (tmp_path / "fail").unlink()
    result = _with_failure(src, out, tmp_path).run(backend="thread", progress=False)
    assert result.skipped_tasks == 0 or result.skipped_tasks < result.tasks
    assert not fs.exists("/bucket/commit-test/out/_work")
    _with_failure(src, str(tmp_path / "local"), tmp_path).run(backend="sequential", progress=False)
    local = {
        str(p.relative_to(tmp_path / "local")): p.read_bytes()
        for p in (tmp_path / "local").rglob("part-*")
    }
    remote = {
        k: v for k, v in _contents(fs, "/bucket/commit-test/out").items() if k.startswith("part-")
    }
    assert remote == local  # byte-identical to a local run
    assert shardwise.index_dataset(out).num_samples == result.rows_out
    fs.rm("/bucket/commit-test", recursive=True)


def test_output_into_a_non_empty_directory_is_refused(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=1, rows=100)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        build(str(src), str(tmp_path / "out")).run(backend="sequential", progress=False)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"


def test_failed_resplit_leaves_nothing_and_skip_counts_bad_records(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=2, rows=900, bad_lines=True)
    with pytest.raises(FormatError):
        resplit(
            str(src),
            str(tmp_path / "o1"),
            target_file_bytes=30_000,
            backend="sequential",
            progress=False,
        )
    assert not (tmp_path / "o1").exists()
    assert main(
        [
            "resplit",
            str(src),
            "--out",
            str(tmp_path / "o2"),
            "--target-mb",
            "0.03",
            "--backend",
            "sequential",
            "--on-error",
            "skip",
        ]
    ) in (0, None)
    manifest = json.loads((tmp_path / "o2" / "_manifest.json").read_text())
    assert manifest["quarantined"] == 4 and manifest["rows_out"] == 1800
    assert not (tmp_path / "o2" / "_work").exists()


def test_prepare_quarantine_reaches_its_result(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=2, rows=900, bad_lines=True)
    files = sorted(str(p) for p in src.glob("*.jsonl"))
    result = prepare(
        files,
        str(tmp_path / "p"),
        steps=["convert", "index"],
        on_error="skip",
        backend="sequential",
        progress=False,
    )
    assert result.quarantined == 4 and result.num_rows == 1800
    with pytest.raises(FormatError):
        prepare(
            files, str(tmp_path / "p2"), steps=["convert"], backend="sequential", progress=False
        )
    assert not (tmp_path / "p2" / "data").exists()


def test_staging_on_another_filesystem_than_the_temporary_directory_is_deleted_in_place(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardwise.pipeline import commit

    work = tmp_path / ".out.shardwise-partial" / "_work"
    (work / "s0").mkdir(parents=True)
    (work / "s0" / "task-00000.arrow").write_bytes(b"x" * 100)

    def cross_device(src: str, dst: str) -> None:
        raise OSError(18, "Invalid cross-device link")

    monkeypatch.setattr(commit.os, "rename", cross_device)
    assert commit._set_aside(str(work)) is None and not work.exists()
