"""A real pipeline run shared by the report tests: a filter, exact and MinHash dedup, and
malformed JSON lines quarantined under ``on_error="skip"``."""

from __future__ import annotations

from pathlib import Path

import pytest
from _reportdata import write_corpus

from shardwise.pipeline import RunResult, read_jsonl


@pytest.fixture(scope="session")
def run(tmp_path_factory: pytest.TempPathFactory) -> RunResult:
    """The published run (its ``_report.html`` written by ``Pipeline.run``)."""
    root = tmp_path_factory.mktemp("report-run")
    write_corpus(root / "raw")
    return (
        read_jsonl(str(root / "raw"), on_error="skip", task_bytes=48 * 1024)
        .apply("word_count_filter", column="text", min=5)
        .dedup(method="exact", column="text")
        .dedup(method="minhash", column="text", threshold=0.7, ngram=3)
        .write_parquet(str(root / "out"), target_shard_bytes=32 * 1024)
        .run(backend="thread", progress=False)
    )


@pytest.fixture(scope="session")
def run_dir(run: RunResult) -> Path:
    return Path(run.manifest).parent
