"""The run report (_report.html): written by every run, self-contained, small, and tables without matplotlib."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from shardwise.cli import main
from shardwise.pipeline import RunResult, read_jsonl
from shardwise.report import load_run, render_run


def test_every_run_writes_its_report_next_to_the_manifest(run_dir: Path) -> None:
    html = (run_dir / "_report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert (run_dir / "_report.html").stat().st_size < 2 * 2**20
    for section in ("ledger", "time", "shards", "dedup", "quarantine"):
        assert f'id="{section}"' in html
    assert html.count('<img class="chart"') >= 7  # ledger, stages, tasks, throughput, shards, 2 clusters
    assert "part-0.jsonl" in html and "line" in html  # quarantined records with file and place


def test_nothing_in_the_page_points_outside_it(run_dir: Path) -> None:
    html = (run_dir / "_report.html").read_text()
    refs = re.findall(r'(?:src|href)\s*=\s*"([^"]*)"', html)
    assert refs and all(r.startswith(("data:image/svg+xml;base64,", "#")) for r in refs)
    assert "<script" not in html and "@import" not in html and "url(" not in html
    assert "@font-face" not in html


def test_the_report_is_rebuilt_from_the_manifests(run_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "again.html"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    assert str(out) in capsys.readouterr().out
    assert out.read_text() == (run_dir / "_report.html").read_text()  # same manifests, same page


def test_a_rerun_of_a_committed_pipeline_keeps_its_report(run: RunResult, run_dir: Path) -> None:
    before = (run_dir / "_report.html").read_text()
    (run_dir / "_report.html").unlink()
    root = run_dir.parent
    again = (read_jsonl(str(root / "raw"), on_error="skip", task_bytes=48 * 1024)
             .apply("word_count_filter", column="text", min=5)
             .dedup(method="exact", column="text")
             .dedup(method="minhash", column="text", threshold=0.7, ngram=3)
             .write_parquet(str(run_dir), target_shard_bytes=32 * 1024)
             .run(backend="thread", progress=False))
    assert again.skipped_tasks == again.tasks
    assert (run_dir / "_report.html").read_text() == before


def test_without_matplotlib_the_report_is_tables_and_names_the_extra(run_dir: Path) -> None:
    code = ("import sys; sys.modules['matplotlib'] = None\n"
            "from shardwise.report import load_run, render_run\n"
            f"sys.stdout.write(render_run(load_run({str(run_dir)!r})))")
    html = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert 'pip install "shardwise[report]"' in html.replace("&quot;", '"')
    assert "<img" not in html
    full = render_run(load_run(str(run_dir)))
    for table_id in re.findall(r'<table id="([^"]+)"', full):
        assert f'<table id="{table_id}"' in html  # every table is still there
