"""The run report (_report.html): written by every run, self-contained, small, and tables
without matplotlib."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from _reportdata import write_corpus

from shardwise.cli import main
from shardwise.pipeline import RunResult, read_jsonl
from shardwise.report import load_run, render_run


def test_every_run_writes_its_report_next_to_the_manifest(run_dir: Path) -> None:
    html = (run_dir / "_report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.rstrip().endswith("</html>")
    assert (run_dir / "_report.html").stat().st_size < 2 * 2**20
    for section in ("ledger", "time", "shards", "dedup", "quarantine"):
        assert f'id="{section}"' in html
    assert (
        html.count('<img class="chart"') >= 7
    )  # ledger, stages, tasks, throughput, shards, 2 clusters
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
    again = (
        read_jsonl(str(root / "raw"), on_error="skip", task_bytes=48 * 1024)
        .apply("word_count_filter", column="text", min=5)
        .dedup(method="exact", column="text")
        .dedup(method="minhash", column="text", threshold=0.7, ngram=3)
        .write_parquet(str(run_dir), target_shard_bytes=32 * 1024)
        .run(backend="thread", progress=False)
    )
    assert again.skipped_tasks == again.tasks * again.stages
    assert (run_dir / "_report.html").read_text() == before


def test_without_matplotlib_the_report_is_tables_and_names_the_extra(run_dir: Path) -> None:
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from shardwise.report import load_run, render_run\n"
        f"sys.stdout.write(render_run(load_run({str(run_dir)!r})))"
    )
    html = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert 'pip install "shardwise[report]"' in html.replace("&quot;", '"')
    assert "<img" not in html
    full = render_run(load_run(str(run_dir)))
    for table_id in re.findall(r'<table id="([^"]+)"', full):
        assert f'<table id="{table_id}"' in html  # every table is still there


def test_a_run_on_object_storage_writes_its_report_there(tmp_path: Path) -> None:
    import fsspec

    write_corpus(tmp_path / "raw")
    out = "memory://bucket/report-test/out"
    result = (
        read_jsonl(str(tmp_path / "raw"), on_error="skip")
        .dedup(method="exact", column="text")
        .write_parquet(out)
        .run(backend="sequential", progress=False)
    )
    fs = fsspec.filesystem("memory")
    try:
        html = fs.cat("/bucket/report-test/out/_report.html").decode()
        r = load_run(out)
        assert (r.rows_in, r.rows_out, r.quarantined) == (
            result.rows_in,
            result.rows_out,
            result.quarantined,
        )
        assert html == render_run(r) and r.dedup[0].cluster_sizes
    finally:
        fs.rm("/bucket/report-test", recursive=True)


def test_shardwise_run_prints_where_the_report_is(tmp_path: Path, capsys) -> None:
    write_corpus(tmp_path / "raw")
    (tmp_path / "config.yaml").write_text(
        f"input: {{path: {tmp_path / 'raw'}, format: jsonl, on_error: skip}}\n"
        "process:\n  - dedup: {method: exact, column: text}\n"
        f"output: {{path: {tmp_path / 'clean'}, format: parquet}}\n"
        "executor: {backend: sequential}\n"
    )
    assert main(["run", str(tmp_path / "config.yaml")]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == f"report: {tmp_path / 'clean' / '_report.html'}"
    assert (tmp_path / "clean" / "_report.html").stat().st_size > 0
    assert not list((tmp_path / "clean").glob("report*"))


def test_rates_and_fractions_cannot_be_read_as_thousands(run_dir: Path) -> None:
    from shardwise.report.html import number

    # "2,211.213" reads as two million where a comma is the decimal mark: fractions are not grouped
    assert number(2211.213) == "2211.2" and number(0.125) == "0.125" and number(2211) == "2,211"
    html = (run_dir / "_report.html").read_text()
    rate = re.search(r"<th>rows in per second</th><td[^>]*>([^<]*)</td>", html)
    assert rate, "the summary shows the rate"
    assert rate.group(1).endswith(" rows/s") and "," not in rate.group(1)
    assert not re.search(r'class="num">\d{1,3}(,\d{3})+\.\d', html)  # no grouped fraction anywhere
