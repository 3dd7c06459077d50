"""CLI conventions: --help everywhere, exit codes, errors on stderr without tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.cli import cli, main


def _commands() -> list[str]:
    return sorted(cli.commands)


@pytest.mark.parametrize("command", [[]] + [[c] for c in _commands()])
def test_help_on_every_command(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    assert "Usage:" in capsys.readouterr().out


def test_inspect_prints_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pq.write_table(pa.table({"id": list(range(25))}), tmp_path / "a.parquet", row_group_size=10)
    assert main(["inspect", str(tmp_path / "a.parquet")]) == 0
    out = capsys.readouterr().out
    assert "samples" in out and "25" in out and "units" in out
    assert main(["inspect", "--json", str(tmp_path / "a.parquet")]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["samples"] == 25 and summary["units"] == 3
    assert summary["smallest_unit"]["samples"] == 5 and summary["largest_unit"]["samples"] == 10


def test_error_goes_to_stderr_without_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "shardwise.cli", "inspect", str(tmp_path / "missing-*.jsonl")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert proc.stderr.startswith("error:") and "missing-*.jsonl" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_debug_shows_traceback(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "shardwise.cli",
            "--debug",
            "inspect",
            str(tmp_path / "nope.parquet"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 1
    assert "Traceback" in proc.stderr


def test_bad_usage_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect"]) == 2
    assert "Missing argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["run", "{cfg}", "--num-proc", "-5"], "--num-proc"),
        (["run", "{cfg}", "--num-proc", "0"], "--num-proc"),
        (["run", "{cfg}", "--backend", "nope"], "--backend"),
        (["prepare", "x", "--out", "{dir}/p", "--backend", "nope"], "--backend"),
        (["inspect", "{dir}", "--format", "csv"], "--format"),
        (["plan", "-s", "{dir}:weight=abc"], "--source"),
    ],
)
def test_bad_option_values_are_bad_usage_named_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], option: str
) -> None:
    """Exit 2 naming the option, before the input is read or any output begun."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"input: {{path: {tmp_path}/in/*.jsonl}}\noutput: {{path: {tmp_path}/out}}\n")
    filled = [a.format(cfg=cfg, dir=tmp_path) for a in args]
    assert main(filled) == 2
    assert f"Invalid value for '{option}'" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.yaml"]


def test_a_bad_executor_in_a_config_names_the_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(
        f"input: {{path: {tmp_path}/*.jsonl}}\noutput: {{path: {tmp_path}/out}}\n"
        "executor: {backend: nope, num_proc: 2}\n"
    )
    assert main(["run", str(cfg)]) == 1
    assert f"{cfg}, line 3: executor.backend is 'nope'" in capsys.readouterr().err
    cfg.write_text(cfg.read_text().replace("backend: nope, num_proc: 2", "num_proc: 0"))
    assert main(["run", str(cfg)]) == 1
    assert "executor.num_proc must be -1" in capsys.readouterr().err


def test_plan_prints_equal_steps_without_reading_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(pa.table({"id": list(range(1000))}), tmp_path / "a.parquet", row_group_size=90)
    assert main(["plan", str(tmp_path), "-w", "4", "-k", "2", "-b", "16", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps_per_rank"] == 1000 // (4 * 2 * 16) * 2
    assert report["samples_left_out"] == 1000 - report["samples_per_rank"] * 4
    assert report["samples_padded"] == 0
    assert report["read_amplification"] >= 1.0
    assert main(["plan", str(tmp_path), "-w", "3", "-b", "7", "--keep-last", "--json"]) == 0
    padded = json.loads(capsys.readouterr().out)
    assert padded["samples_left_out"] == 0 and padded["samples_padded"] == 3 * 7 * 48 - 1000
    assert main(["plan", str(tmp_path), "-w", "0"]) == 2


def test_plan_uses_the_loaders_default_interleave(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    from shardwise.loader import StreamingDataset

    table = pa.table(
        {"id": list(range(20_000)), "text": [os.urandom(100).hex() for _ in range(20_000)]}
    )
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=500)
    seen = []
    for shuffle_mb in (1, 512):
        assert main(["plan", str(tmp_path), "--shuffle-mb", str(shuffle_mb), "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        ds = StreamingDataset(str(tmp_path), shuffle_bytes=shuffle_mb * 2**20, rank=0, world_size=1)
        assert report["interleave"] == ds.interleave
        seen.append(report["interleave"])
    assert seen[0] < seen[1] == 64  # a small budget mixes fewer units; the default is capped


@pytest.mark.parametrize("first_window", ["auto", "heads", "none"])
def test_plan_has_the_loaders_first_window(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], first_window: str
) -> None:
    from shardwise.loader import StreamingDataset

    pad = pa.array([os.urandom(5300) for _ in range(4000)])  # units of 1 MB: large enough for heads
    table = pa.table({"id": list(range(4000)), "pad": pad})
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=200)
    args = ["plan", str(tmp_path), "-b", "16", "--first-window", first_window]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    given = None if first_window == "none" else first_window
    ds = StreamingDataset(str(tmp_path), batch_size=16, first_window=given, rank=0, world_size=1)
    assert report["blocks"] == ds.blocks
    assert (ds.blocks > 1) == (first_window != "none")  # 20 units: auto takes heads here
    assert report["steps_per_rank"] == len(ds) // 16 == 250 and report["samples_left_out"] == 0
    assert main(args) == 0
    shown = capsys.readouterr().out
    assert ("heads: every unit's first 1/" in shown) == (ds.blocks > 1)


def test_a_wrong_explicit_format_is_an_error_and_keeps_the_saved_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(pa.table({"id": list(range(50))}), tmp_path / "a.parquet", row_group_size=10)
    assert main(["inspect", str(tmp_path)]) == 0
    saved = (tmp_path / "_shardwise_index.json").read_bytes()
    capsys.readouterr()
    assert main(["inspect", str(tmp_path), "--format", "jsonl"]) == 1
    err = capsys.readouterr().err
    assert "a.parquet" in err and "parquet file" in err
    assert (tmp_path / "_shardwise_index.json").read_bytes() == saved


def test_jsonl_on_parquet_files_without_suffix_is_refused_and_keeps_the_saved_index(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for i in range(2):  # names that say nothing of the format, as some writers leave them
        pq.write_table(pa.table({"id": list(range(50))}), tmp_path / f"part-{i}", row_group_size=10)
    assert main(["inspect", str(tmp_path), "--format", "parquet"]) == 0
    saved = (tmp_path / "_shardwise_index.json").read_bytes()
    capsys.readouterr()
    assert main(["inspect", str(tmp_path), "--format", "jsonl"]) == 1
    err = capsys.readouterr().err
    assert "part-" in err and "not JSON lines: this is a Parquet file" in err
    assert (tmp_path / "_shardwise_index.json").read_bytes() == saved
    assert main(["inspect", str(tmp_path), "--format", "parquet", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["samples"] == 100


def test_inspect_skip_leaves_bad_samples_out_and_says_how_many(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in (
            "a.txt",
            "../evil.txt",
            "c.txt",
            "a.json",
        ):  # unsafe, then a key that comes back
            info = tarfile.TarInfo(name)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    (tmp_path / "s.tar").write_bytes(buf.getvalue())
    assert main(["inspect", str(tmp_path / "s.tar")]) == 1
    assert "member ../evil.txt" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "s.tar"), "--on-error", "skip", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["samples"], summary["skipped"]) == (2, 2)
    assert main(["inspect", str(tmp_path / "s.tar"), "--on-error", "skip"]) == 0
    assert "2 bad samples left out" in capsys.readouterr().out


def test_plan_with_replication_is_cut_for_the_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq.write_table(pa.table({"id": list(range(1000))}), tmp_path / "a.parquet", row_group_size=90)
    assert (
        main(
            [
                "plan",
                str(tmp_path),
                "-w",
                "8",
                "--replication",
                "2",
                "-k",
                "2",
                "-b",
                "16",
                "--json",
            ]
        )
        == 0
    )
    grouped = json.loads(capsys.readouterr().out)
    assert main(["plan", str(tmp_path), "-w", "4", "-k", "2", "-b", "16", "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert (grouped["world_size"], grouped["groups"], grouped["replication"]) == (8, 4, 2)
    for key in ("steps_per_rank", "samples_per_rank", "samples_left_out", "read_amplification"):
        assert grouped[key] == plain[key]
    html = tmp_path / "plan.html"
    assert (
        main(
            [
                "plan",
                str(tmp_path),
                "-w",
                "8",
                "-r",
                "2",
                "-k",
                "2",
                "-b",
                "16",
                "--html",
                str(html),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "8 ranks in 4 groups of 2" in out and "per group" in out
    page = html.read_text()
    assert "4 groups of 2 ranks (8 ranks" in page and "0-3 (ranks 0-7)" in page
    assert main(["plan", str(tmp_path), "-w", "6", "--replication", "4"]) == 2
    assert "--replication" in capsys.readouterr().err


def test_plan_with_sources_prints_each_sources_exact_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardwise import Source, StreamingDataset

    pq.write_table(pa.table({"id": list(range(1000))}), tmp_path / "web.parquet", row_group_size=90)
    (tmp_path / "code.jsonl").write_text(
        "".join(json.dumps({"id": 5000 + i}) + "\n" for i in range(130))
    )
    web, code = str(tmp_path / "web.parquet"), str(tmp_path / "code.jsonl")
    args = [
        "plan",
        "-s",
        f"{web}:weight=3,name=web",
        "-s",
        f"{code}:weight=1,name=code",
        "--epoch-size",
        "700",
        "--batching",
        "stratified",
        "-w",
        "2",
        "-k",
        "2",
        "-b",
        "8",
    ]
    assert main([*args, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    ds = StreamingDataset(
        [Source(web, weight=3, name="web"), Source(code, weight=1, name="code")],
        epoch_size=700,
        batching="stratified",
        world_size=2,
        num_workers=2,
        batch_size=8,
    )
    expected = [s["samples"] for s in ds.stats()["per_source"]]
    assert (
        [r["samples this epoch"] for r in report["sources"]] == expected == [504, 168]
    )  # 21 batches of 6 + 2 per worker
    assert report["steps_per_rank"] == ds.stats()["steps_per_rank"]
    html = tmp_path / "plan.html"
    assert main([*args, "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "source web" in out and "504 samples this epoch" in out and "source code" in out
    assert "per batch off its share by 0.00 / 0.00" in out  # 6 + 2 of every 8: exact shares
    assert all(r["realised"] == r["samples this epoch"] for r in report["sources"])
    assert "code" in html.read_text()
    assert (
        main(
            [
                "plan",
                "-s",
                f"{web}:repeat=0.5",
                "--canonical-workers",
                "4",
                "-w",
                "2",
                "-k",
                "2",
                "-b",
                "8",
            ]
        )
        == 0
    )
    assert "canonical workers" in capsys.readouterr().out
    assert main(["plan", web, "-s", code]) == 2
    assert main(["plan", "-s", f"{web}:wieght=3"]) == 2  # bad usage: the option's text
    assert "wieght" in capsys.readouterr().err


def test_plan_without_paths_or_sources_says_which_is_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["plan"]) == 2
    err = capsys.readouterr().err
    assert "give PATHS or --source options (one or more)" in err and "not both" not in err
