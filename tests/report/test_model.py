"""The report's numbers are the manifests' numbers, and its JSON reads back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from shardwise.cli import main
from shardwise.errors import FormatError
from shardwise.pipeline import RunResult
from shardwise.report import RunReport, load_run


def _manifest(run_dir: Path) -> dict:
    return json.loads((run_dir / "_manifest.json").read_text())


def test_ledger_files_and_stages_equal_the_manifest(run_dir: Path) -> None:
    m = _manifest(run_dir)
    r = load_run(str(run_dir))
    assert (r.rows_in, r.rows_out, r.quarantined, r.dropped) == (
        m["rows_in"],
        m["rows_out"],
        m["quarantined"],
        m["dropped"],
    )
    assert r.rows_in == r.rows_out + r.dropped_total + r.quarantined
    assert r.quarantined == 4 and len(r.quarantine_examples) == 4
    assert all(e[0].endswith(".jsonl") and "line" in e[1] for e in r.quarantine_examples)
    assert r.files == m["files"] and len(r.files) >= 2
    assert [s["stage"] for s in r.stages] == [0, 1, 2]  # cut at both dedups
    assert r.stages[0]["operators"] == ["word_count_filter", "exact_dedup"]
    assert r.stages[0]["decide_seconds"] == m["dedup"]["exact_dedup"]["seconds"]


def test_task_times_equal_the_task_manifests(run_dir: Path) -> None:
    r = load_run(str(run_dir))
    m = _manifest(run_dir)
    assert len(r.tasks) == m["tasks"]
    for t in r.tasks:
        tm = json.loads((run_dir / "_manifests" / f"task-{t.task:05d}.json").read_text())
        assert (t.rows_in, t.rows_out) == (tm["rows_in"], tm["rows_out"])
        assert [s["stage"] for s in t.stages] == [0, 1, 2]
        assert t.stages[-1]["seconds"] == tm["seconds"] and t.stages[-1]["started"] == tm["started"]
        assert all(
            a["started"] + a["seconds"] <= b["started"] for a, b in zip(t.stages, t.stages[1:])
        )
    assert [t.stages[-1]["seconds"] for t in r.tasks] == m["task_seconds"]
    points = r.throughput()
    assert points[-1][1] == r.rows_in and all(a[1] <= b[1] for a, b in zip(points, points[1:]))


def test_cluster_sizes_come_from_the_audit_tables(run_dir: Path, run: RunResult) -> None:
    r = load_run(str(run_dir))
    assert [d.name for d in r.dedup] == ["exact_dedup", "minhash_dedup"]
    for d in r.dedup:
        audit = pq.read_table(run_dir / f"_dedup_{d.name}.parquet").to_pydict()
        kept = list(zip(audit["kept_task"], audit["kept_row"]))
        assert (
            sum(n * (size - 1) for size, n in d.cluster_sizes.items())
            == len(kept)
            == d.summary["removed"]
        )
        assert sum(d.cluster_sizes.values()) == len(set(kept)) == d.summary["clusters"]
        assert run.dropped[d.name]["duplicate"] == d.summary["removed"]
        assert d.examples and len(d.examples) <= 4
        for e in d.examples:
            mine = [
                (t, row)
                for (t, row), k in zip(zip(audit["removed_task"], audit["removed_row"]), kept)
                if k == (e["kept"]["task"], e["kept"]["row"])
            ]
            assert e["cluster_size"] == len(mine) + 1
            assert [(x["task"], x["row"]) for x in e["removed"]] == mine[:3]
            assert e["kept"]["text"] and all(x["text"] for x in e["removed"])
    exact = r.dedup[0].examples[0]
    norm = [
        " ".join(t.lower().split())
        for t in [exact["kept"]["text"], *(x["text"] for x in exact["removed"])]
    ]
    assert len(set(norm)) == 1  # an exact cluster: the same text once normalised


def test_json_round_trips(run_dir: Path) -> None:
    r = load_run(str(run_dir))
    data = json.loads(json.dumps(r.to_json()))
    back = RunReport.from_json(data)
    assert back == r
    assert back.to_json() == r.to_json()
    assert data["unaccounted"] == 0


def test_cli_json_prints_the_manifest_numbers(run_dir: Path, capsys) -> None:
    assert main(["report", str(run_dir), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    m = _manifest(run_dir)
    for key in (
        "rows_in",
        "rows_out",
        "dropped",
        "quarantined",
        "quarantine_examples",
        "files",
        "stages",
    ):
        assert data[key] == m[key], key
    summaries = {d["name"]: d["summary"] for d in data["dedup"]}
    assert summaries == {
        k: {kk: vv for kk, vv in v.items() if kk != "examples"} for k, v in m["dedup"].items()
    }
    assert RunReport.from_json(data) == load_run(str(run_dir))


def test_exact_dedup_audit_maps_removed_rows_to_the_first_occurrence() -> None:
    from shardwise.ops.exact import first_occurrences, first_of_each_row

    keys = [
        np.array([[1, 1], [2, 2]], np.uint64),
        np.zeros((0, 2), np.uint64),
        np.array([[2, 2], [1, 1], [3, 3], [2, 2]], np.uint64),
    ]
    assert first_of_each_row(keys).tolist() == [0, 1, 1, 0, 4, 1]
    assert [m.tolist() for m in first_occurrences(keys)] == [
        [True, True],
        [],
        [False, False, True, False],
    ]


@pytest.mark.parametrize(
    ("text", "says"),
    [("{", "unreadable manifest"), ("[]", "not a run manifest"), ("{}", "not a run manifest")],
)
def test_a_damaged_manifest_is_an_error_naming_it(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "_manifest.json").write_text(text)
    with pytest.raises(FormatError, match=f"_manifest.json: {says}"):
        load_run(str(tmp_path))
