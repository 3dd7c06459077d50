"""The dedup contract: a user's DedupOp runs through the pipeline with the services the
runner hands it (task keys, scratch, the backend's map, the audit writer)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _dedups import KeepFirstOfEachLength
from _pipeline_common import make_input

from shardwise import ConfigError
from shardwise.ops import get_op, known_ops, register_op
from shardwise.pipeline import read_jsonl


@pytest.mark.parametrize("backend", ["sequential", "local"])
def test_a_custom_dedup_op_runs_with_every_service(tmp_path: Path, backend: str) -> None:
    src = make_input(tmp_path / "in", files=2, rows=300)
    rows = [
        json.loads(line) for f in sorted(src.glob("*.jsonl")) for line in f.read_text().splitlines()
    ]
    expected, seen = [], set()
    for r in rows:  # input order is file order, then line order
        if len(r["text"]) not in seen:
            expected.append(r["id"])
            seen.add(len(r["text"]))
    result = (
        read_jsonl(str(src), task_bytes=10_000)
        .dedup(KeepFirstOfEachLength())
        .write_parquet(str(tmp_path / "out"))
        .run(backend=backend, progress=False)
    )
    ids = pq.read_table(str(tmp_path / "out"), columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == sorted(expected)
    assert result.tasks > 2
    assert result.dropped == {"KeepFirstOfEachLength": {"duplicate": len(rows) - len(expected)}}
    summary = json.loads(Path(result.manifest).read_text())["dedup"]["KeepFirstOfEachLength"]
    assert summary["stage"] == "KeepFirstOfEachLength"
    assert pq.read_table(summary["audit"]).column("removed").to_pylist() == [
        len(rows) - len(expected)
    ]


def test_registered_dedup_class_is_known_and_its_arguments_checked() -> None:
    register_op("keep_first_of_each_length", "dedup")(KeepFirstOfEachLength)
    assert known_ops()["keep_first_of_each_length"] == "dedup"
    op = get_op("keep_first_of_each_length", column="body")
    assert op.dedup == KeepFirstOfEachLength(column="body")
    with pytest.raises(ConfigError, match="did you mean 'column'"):
        get_op("keep_first_of_each_length", colum="body")
    with pytest.raises(ConfigError, match="DedupOp subclass"):
        register_op("not_a_dedup", "dedup")(lambda batch: batch)


def test_builtin_names_resolve_lazily_and_unknown_names_suggest() -> None:
    ops = known_ops()
    assert ops["minhash_dedup"] == "dedup" and ops["normalize_text"] == "map"
    assert ops["length_filter"] == "filter"
    with pytest.raises(ConfigError, match="did you mean 'strip_urls'"):
        get_op("strip_url")
    with pytest.raises(ConfigError, match="threshold must be in"):
        get_op("minhash_dedup", threshold=1.5)


def test_two_minhash_stages_write_their_own_audits(tmp_path: Path) -> None:
    src = make_input(tmp_path / "in", files=2, rows=300)
    result = (
        read_jsonl(str(src), task_bytes=10_000)
        .dedup("minhash", column="text", ngram=2, threshold=0.9)
        .apply("normalize_text", column="text", lowercase=True)
        .dedup("minhash", column="text", ngram=1, threshold=0.5)
        .write_parquet(str(tmp_path / "out"))
        .run(backend="sequential", progress=False)
    )
    summaries = json.loads(Path(result.manifest).read_text())["dedup"]
    assert set(summaries) == {"minhash_dedup", "minhash_dedup#2"}
    audits = [summaries[k]["audit"] for k in ("minhash_dedup", "minhash_dedup#2")]
    assert len(set(audits)) == 2 and all(Path(a).exists() for a in audits)
    assert [pq.read_metadata(a).num_rows for a in audits] == [
        summaries[k]["removed"] for k in summaries
    ]
    assert (
        result.dropped["minhash_dedup#2"]["duplicate"]
        == summaries["minhash_dedup#2"]["removed"]
        > 0
    )
