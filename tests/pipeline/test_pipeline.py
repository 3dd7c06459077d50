"""Pipelines: accounting, identical bytes on every backend, crash and rerun, YAML, resplit."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _pipeline_common import build, make_input
from _tasks import drop_odd, kill_once_in_map

import shardwise
from shardwise import ConfigError, EmptyDatasetError, FormatError, UnsupportedError
from shardwise.cli import main
from shardwise.pipeline import read_jsonl, read_parquet, resplit


def _files(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("part-*.parquet"))}


def _balanced(result: Any) -> None:
    dropped = sum(n for r in result.dropped.values() for n in r.values())
    assert result.rows_in == result.rows_out + dropped + result.quarantined


@pytest.fixture(scope="module")
def src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_input(tmp_path_factory.mktemp("pin") / "in")


@pytest.fixture(scope="module")
def reference(src: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    out = tmp_path_factory.mktemp("ref") / "out"
    return out, build(str(src), str(out)).run(backend="sequential", progress=False)


def test_accounting_balances_and_counts_every_reason(reference: tuple[Path, Any]) -> None:
    out, result = reference
    _balanced(result)
    assert result.rows_in == 6000
    # 30 planted copies per file (one survives) and, per file, one "tiny text see <url>"
    # that becomes a 3-word duplicate once the URL is stripped
    assert result.dropped["exact_dedup"]["duplicate"] == (4 * 30 - 1) + (4 - 1)
    assert result.dropped["word_count_filter"]["word count below 3"] > 0
    assert result.tasks > 3
    manifest = json.loads((out / "_manifest.json").read_text())
    assert manifest["rows_out"] == result.rows_out
    assert {f["path"] for f in manifest["files"]} == set(_files(out))
    for t in range(result.tasks):
        task = json.loads((out / "_manifests" / f"task-{t:05d}.json").read_text())
        assert task["rows_in"] > 0
    rows = pq.read_table(out).to_pylist()
    assert len(rows) == result.rows_out
    assert sum("duplicate document" in r["text"] for r in rows) == 1
    first_dup = min(r["id"] for r in rows if "duplicate document" in r["text"])
    assert first_dup == 0  # the first copy in input order is the one kept
    assert not any("https://" in r["text"] for r in rows)


@pytest.mark.engine
def test_same_bytes_on_every_backend(
    src: Path, reference: tuple[Path, Any], tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from _engines import make_backend

    expected = _files(reference[0])
    for name in ["local", "thread", "ray", "spark", "dask"]:
        b = make_backend(name, request)
        try:
            out = tmp_path / name
            result = build(str(src), str(out)).run(backend=b, progress=False)
        finally:
            b.close()
        assert result.rows_out == reference[1].rows_out, name
        assert _files(out) == expected, f"{name} wrote different bytes"


def test_worker_sigkilled_mid_task_is_retried(
    src: Path, reference: tuple[Path, Any], tmp_path: Path
) -> None:
    out = tmp_path / "out"
    p = read_jsonl(str(src), task_bytes=40_000).map(kill_once_in_map, marker_dir=str(tmp_path))
    p2 = build(str(src), str(out))
    p = p2.__class__(**{**p2.__dict__, "ops": (*p.ops, *p2.ops)})
    result = p.run(backend="local", progress=False)
    assert (tmp_path / "map-killed").exists()
    assert result.rows_out == reference[1].rows_out
    assert _files(out) == _files(reference[0])


def _committed(staging: Path) -> list[Path]:
    """Tasks a run has committed so far: a stage's done markers in its work directory
    (the dedup stage's tasks commit there), and the last stage's task manifests, which
    appear only at the end, a moment before the run's output is moved into place."""
    return [*staging.glob("_work/*/task-*.done.json"), *staging.glob("_manifests/task-*.json")]


def test_driver_killed_mid_run_then_rerun_is_identical(src: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = Path(__file__).parent.parent / "support" / "_pipeline_run.py"
    ref_out = tmp_path / "ref"
    build(str(src), str(ref_out), slow=True).run(backend="sequential", progress=False)
    staging = tmp_path / ".out.shardwise-partial"  # where an unfinished run writes
    proc = subprocess.Popen([sys.executable, str(script), str(src), str(out), "sequential", "slow"])
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_committed(staging)) < 3:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    # the run really was cut short, and nothing of it is where readers look
    assert not out.exists()
    with pytest.raises(EmptyDatasetError):
        shardwise.index_dataset(str(out))
    committed = len(_committed(staging))
    result = build(str(src), str(out), slow=True).run(backend="local", progress=False)
    # every committed task run is reused, and said: a stage's runs each count
    assert committed >= 3 and result.skipped_tasks == committed and result.stages == 2
    assert _files(out) == _files(ref_out)
    assert not list(out.rglob("_tmp.*"))
    assert not (out / "_work").exists() and not staging.exists()
    _balanced(result)


def test_malformed_records_raise_or_are_quarantined(tmp_path: Path) -> None:
    src = make_input(tmp_path / "bad", files=2, rows=800, bad_lines=True)
    with pytest.raises(FormatError) as info:
        build(str(src), str(tmp_path / "o1")).run(backend="thread", progress=False)
    # tasks run concurrently, so the error is the first bad line some task met: any of
    # the four, but named exactly (file and line)
    assert re.search(r"in-[01]\.jsonl, line (12|703):", str(info.value)), str(info.value)
    result = build(str(src), str(tmp_path / "o2"), on_error="skip").run(
        backend="thread", progress=False
    )
    assert result.quarantined == 4
    assert result.rows_in == 1604
    _balanced(result)
    assert any("line 12" in e[1] for e in result.quarantine_examples)


def test_records_without_fields_are_refused_by_parquet_and_kept_by_jsonl(
    tmp_path: Path,
) -> None:
    (tmp_path / "in.jsonl").write_text("{}\n" * 4)
    with pytest.raises(UnsupportedError, match=r"output \S*pq \(parquet\).*4 rows with no col"):
        read_jsonl(str(tmp_path / "in.jsonl")).write_parquet(str(tmp_path / "pq")).run(
            progress=False
        )
    result = (
        read_jsonl(str(tmp_path / "in.jsonl")).write_jsonl(str(tmp_path / "j")).run(progress=False)
    )
    assert result.rows_in == result.rows_out == 4
    (out,) = (tmp_path / "j").glob("*.jsonl")
    assert out.read_text() == "{}\n" * 4


def test_bad_tar_samples_raise_or_are_quarantined_and_counted(tmp_path: Path) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in ("a.txt", "../evil.txt", "c.txt", "a.json", "d.txt"):  # unsafe; a key back
            info = tarfile.TarInfo(name)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "s.tar").write_bytes(buf.getvalue())
    with pytest.raises(FormatError, match="member ../evil.txt"):
        shardwise.read_webdataset(str(tmp_path / "s.tar")).write_parquet(str(tmp_path / "o1")).run(
            backend="thread", progress=False
        )
    result = (
        shardwise.read_webdataset(str(tmp_path / "s.tar"), on_error="skip")
        .write_parquet(str(tmp_path / "o2"))
        .run(backend="thread", progress=False)
    )
    assert (result.rows_in, result.rows_out, result.quarantined) == (5, 3, 2)
    _balanced(result)


def test_readers_use_the_manifest_not_a_glob(reference: tuple[Path, Any], tmp_path: Path) -> None:
    out, result = reference
    stray = out / "part-99999-00000.parquet"
    stray.write_bytes((out / sorted(_files(out))[0]).read_bytes())
    try:
        index = shardwise.index_dataset(str(out), progress=False, refresh=True)
        assert index.num_samples == result.rows_out
        ds = shardwise.StreamingDataset(
            str(out),
            batch_size=1,
            shuffle=False,
            drop_last=False,
            world_size=1,
            rank=0,
            batch_format="numpy",
        )
        assert sum(len(b["id"]) for b in ds.iter_shard(0, 1)) == result.rows_out
    finally:
        stray.unlink()


def test_rerun_of_another_pipeline_into_the_same_dir_is_refused(
    src: Path, reference: tuple[Path, Any]
) -> None:
    out, _ = reference
    with pytest.raises(ConfigError, match="another pipeline"):
        read_jsonl(str(src)).apply("strip_html").write_parquet(str(out)).run(progress=False)
    again = build(str(src), str(out)).run(progress=False)
    assert again.skipped_tasks == again.tasks * again.stages  # complete: nothing redone


def test_user_functions_and_filter_reasons(src: Path, tmp_path: Path) -> None:
    result = (
        read_jsonl(str(src))
        .filter(drop_odd)
        .map(lambda b: b.select(["id"]))
        .write_jsonl(str(tmp_path / "o"))
        .run(backend="local", progress=False)
    )
    assert result.dropped == {"drop_odd": {"odd id": 3000}}
    ids = [
        json.loads(line)["id"]
        for f in sorted((tmp_path / "o").glob("*.jsonl"))
        for line in f.read_text().splitlines()
    ]
    assert ids == list(range(0, 6000, 2))


def test_yaml_config_runs_and_errors_name_the_line(
    src: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"""input:
  path: {src}
  format: jsonl
process:
  - normalize_text: {{column: text, lowercase: true}}
  - word_count_filter: {{column: text, min: 3}}
  - dedup: {{method: exact, column: text}}
output: {{path: {tmp_path / "out"}, target_shard_mb: 0.02}}
executor: {{backend: thread}}
""")
    assert main(["run", str(cfg), "--accounting", str(tmp_path / "acct.json")]) == 0
    out = capsys.readouterr().out
    assert "unaccounted (must be 0)" in out and "exact_dedup" in out
    acct = json.loads((tmp_path / "acct.json").read_text())
    assert acct["rows_in"] == 6000
    bad = [
        (
            "input: {path: x}\noutput: {path: y}\nexecutor: {backend: local, cores: 2}\n",
            "line 3",
            "cores",
        ),
        (
            "input: {path: x}\noutput: {path: y}\nprocess:\n  - word_count_filter: {mn: 3}\n",
            "line 4",
            "mn",
        ),
        (
            "input: {path: x}\noutput: {path: y}\nprocess:\n  - normalise_text: {}\n",
            "line 4",
            "unknown operator",
        ),
        ("input: {path: x}\nouptut: {path: y}\n", "line 2", "unknown key 'ouptut'"),
        ("input: {path: x\n", "line", "not valid YAML"),
        ("input: {format: jsonl}\noutput: {path: y}\n", "line 1", "needs path"),
    ]
    for text, where, what in bad:
        cfg.write_text(text)
        assert main(["run", str(cfg)]) == 1
        err = capsys.readouterr().err
        assert str(cfg) in err and where in err and what in err, err


def test_resplit_balances_files(reference: tuple[Path, Any], tmp_path: Path) -> None:
    out, result = reference
    r = resplit(str(out), str(tmp_path / "rs"), target_file_bytes=10_000, progress=False)
    rows = [f["rows"] for f in r.files]
    assert len(rows) >= 2 * (os.cpu_count() or 1)
    assert max(rows) - min(rows) <= 1
    assert sum(rows) == result.rows_out
    again = read_parquet(str(tmp_path / "rs")).index()
    assert again.num_samples == result.rows_out


def test_small_input_runs_in_the_driver_with_the_pool_output(
    src: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardwise.parallel.backends.local import LocalBackend
    from shardwise.pipeline import runner

    opened: list[int] = []
    real_open = LocalBackend.open

    def counting_open(self: LocalBackend, *a: Any, **kw: Any) -> Any:
        opened.append(1)
        return real_open(self, *a, **kw)

    monkeypatch.setattr(LocalBackend, "open", counting_open)

    def run(
        out: Path, backend: str | None
    ) -> Any:  # shardwise's own operators only, a MinHash decision too
        return (
            read_jsonl(str(src), task_bytes=40_000)
            .apply("normalize_text", column="text")
            .dedup("minhash", column="text", verify=True)
            .write_parquet(str(out))
            .run(backend=backend, progress=False, report=False)
        )

    small = run(tmp_path / "driver", None)
    assert small.tasks > 1 and not opened  # under IN_DRIVER_WORK: no pool session at all
    run(tmp_path / "driver-local", "local")
    assert not opened
    monkeypatch.setattr(runner, "IN_DRIVER_WORK", 0)
    pooled = run(
        tmp_path / "pool", None
    )  # under CALLER_SLOT_WORK: the driver is one of the pool's slots
    assert opened  # the stage maps and the dedup's maps went to the pool
    assert pooled.rows_out == small.rows_out < small.rows_in
    monkeypatch.setattr(runner, "CALLER_SLOT_WORK", 0)
    run(tmp_path / "workers", "local")  # workers only
    assert (
        _files(tmp_path / "pool")
        == _files(tmp_path / "driver")
        == _files(tmp_path / "driver-local")
    )
    assert _files(tmp_path / "workers") == _files(tmp_path / "pool")
    # a user function keeps the pool (its crash must not take the driver down)
    opened.clear()
    monkeypatch.setattr(runner, "IN_DRIVER_WORK", 2**40)
    read_jsonl(str(src)).map(_upper).write_parquet(str(tmp_path / "user")).run(
        progress=False, report=False
    )
    assert opened


def _upper(batch: Any) -> Any:
    import pyarrow.compute as pc

    return batch.set_column(
        batch.schema.get_field_index("text"), "text", pc.utf8_upper(batch.column("text"))
    )


@pytest.mark.parametrize("method", ["exact", "minhash"])
def test_a_dedup_over_tasks_that_keep_no_row(tmp_path: Path, method: str) -> None:
    """A task the filter empties, and a 0-row input: the dedup's stage files of those tasks
    hold nothing, and the run completes with the counts balanced."""
    import pyarrow.compute as pc

    src = tmp_path / "in"
    src.mkdir()
    for name, word in (("a", "keep"), ("b", "drop")):
        rows = [json.dumps({"id": i, "text": f"{word} me {i}"}) for i in range(5)]
        (src / f"{name}.jsonl").write_text("\n".join(rows) + "\n")
    (tmp_path / "empty.jsonl").write_text("")

    def keep(batch: Any) -> Any:
        return pc.invert(pc.starts_with(batch["text"], "drop"))

    for pattern, rows_out in ((str(src / "*.jsonl"), 5), (str(tmp_path / "empty.jsonl"), 0)):
        out = tmp_path / f"out-{rows_out}"
        p = read_jsonl(pattern, task_bytes=100).filter(keep, reason="drop").dedup(method=method)
        result = p.write_parquet(str(out)).run(backend="thread", progress=False)
        assert result.rows_out == rows_out
        assert result.rows_in == result.rows_out + sum(
            n for reasons in result.dropped.values() for n in reasons.values()
        )
