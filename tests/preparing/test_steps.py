"""Which backend runs each step of prepare, and the refusals naming step, backend and the
backends that can (no engine is started: a backend only connects when it runs work)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardwise import ConfigError, UnsupportedError
from shardwise.parallel import (
    active_backend,
    get_backend,
    parallel_backend,
    parallel_map,
    step_backends,
)
from shardwise.preparing import prepare
from shardwise.preparing.steps import backend_for, expand_steps


def _src(tmp_path: Path) -> Path:
    src = tmp_path / "in"
    src.mkdir(exist_ok=True)
    (src / "x.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(50)))
    return src


@pytest.mark.parametrize("engine", ["ray", "spark", "dask"])
def test_download_to_a_local_directory_on_a_cluster_backend_is_refused(
    engine: str, tmp_path: Path
) -> None:
    with (
        parallel_backend(engine, steps=["download", "prepare"]),
        pytest.raises(NotImplementedError) as info,
    ):
        prepare(["http://127.0.0.1:9/a.jsonl"], str(tmp_path / "o"), progress=False)
    assert isinstance(info.value, UnsupportedError)
    text = str(info.value)
    assert f"step 'download' cannot run on backend {engine!r}" in text
    assert (
        "thread, sequential, local, joblib" in text
        and "ray, spark, dask when the output is shared" in text
    )
    assert not (tmp_path / "o").exists()  # refused before any work


def test_a_backend_a_step_does_not_list_is_refused_with_the_list() -> None:
    with pytest.raises(
        UnsupportedError, match=r"step 'convert' cannot run on backend 'mine'; it runs on: thread"
    ):
        backend_for("convert", "mine", "s3://b/o", True)
    assert backend_for("download", "ray", "s3://b/o", True) == "ray"


def test_steps_and_aliases() -> None:
    assert expand_steps(["prepare"]) == ["convert", "index"]
    assert expand_steps(["index", "download", "prepare"]) == ["download", "convert", "index"]
    with pytest.raises(
        ConfigError, match="unknown steps.*known steps: download, convert, index, prepare"
    ):
        expand_steps(["fetch"])


def test_step_scoped_backend_leaves_other_work_alone(tmp_path: Path) -> None:
    outer = get_backend("sequential")
    with parallel_backend(outer):
        with parallel_backend("thread", steps=["convert"]) as inner:
            assert active_backend() is outer  # other parallel work keeps the block's backend
            assert step_backends() == {"convert": inner}
            assert backend_for("convert", None, "out", False) is inner
            assert backend_for("index", None, "out", False) is outer
            assert backend_for("download", None, "out", False) is outer  # sequential can download
            assert parallel_map(abs, [-1, 2], progress=False) == [1, 2]
            r = prepare([str(_src(tmp_path))], str(tmp_path / "o"), progress=False)
            assert r.num_rows == 50
        assert step_backends() == {}
    with pytest.raises(ConfigError, match="steps must be a non-empty list"):
        with parallel_backend("thread", steps="download"):
            pass
    with (
        parallel_backend("thread", steps=["downlaod"]),
        pytest.raises(ConfigError, match="unknown steps"),
    ):
        prepare([str(_src(tmp_path))], str(tmp_path / "o2"), progress=False)
