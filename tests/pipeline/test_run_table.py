"""The accounting table of a run lists the drops in the pipeline's order, and a rerun of
a complete pipeline (a notebook cell run again) prints the very table of the first run,
though the manifest it is read back from keeps its keys sorted."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from shardwise.pipeline import read_jsonl


def _raw(root: Path) -> Path:
    root.mkdir()
    with open(root / "part-0.jsonl", "w") as f:
        for i in range(600):  # every 10th too short, and copies of 400 texts
            text = "too short" if i % 10 == 0 else f"document {i % 400} with words enough"
            f.write(json.dumps({"id": i, "text": text}) + "\n")
    return root


def _late_ids(batch: pa.RecordBatch) -> pa.Array:
    return pc.less(batch.column("id"), 550)


def test_a_rerun_prints_the_table_of_the_first_run(tmp_path: Path) -> None:
    pipeline = (
        read_jsonl(str(_raw(tmp_path / "raw")))
        .filter(_late_ids, reason="late")  # named after the function: sorts last
        .apply("word_count_filter", column="text", min=3)
        .dedup(method="exact", column="text")  # sorts first
        .write_parquet(str(tmp_path / "out"))
    )
    first = pipeline.run(progress=False)
    again = pipeline.run(progress=False)
    assert again.skipped_tasks > 0  # nothing was run again
    assert again.table() == first.table()
    lines = first.table().splitlines()
    assert [line.split(":")[0].strip() for line in lines if "dropped" in line] == [
        "dropped _late_ids",
        "dropped word_count_filter",
        "dropped exact_dedup",
    ]
    assert list(again.dropped) == ["_late_ids", "word_count_filter", "exact_dedup"]
