"""Task planning: tasks follow the data, and come in whole waves for 2, 4 or 8 workers."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from shardwise.index import index_dataset
from shardwise.pipeline.task_split import MIN_SPLIT, plan_tasks


def _parquet(tmp_path: Path, rows: int, files: int) -> Path:
    d = tmp_path / "pq"
    d.mkdir()
    for f in range(files):
        pq.write_table(
            pa.table({"x": list(range(f * rows, (f + 1) * rows))}),
            d / f"part-{f}.parquet",
            row_group_size=max(1, rows // 4),
        )
    return d


def test_more_than_eight_tasks_come_in_multiples_of_eight(tmp_path: Path) -> None:
    index = index_dataset(str(_parquet(tmp_path, 20_000, 3)), "parquet")
    size = index.num_bytes
    for target in (size // 9, size // 13, size // 30):
        n = len(plan_tasks(index, max(1, target)))
        assert n > MIN_SPLIT and n % MIN_SPLIT == 0, (target, n)
    counts = index.counts()
    rows = [
        sum((p.hi if p.hi >= 0 else int(counts[p.unit])) - p.lo for p in t)
        for t in plan_tasks(index, max(1, size // 9))
    ]
    assert sum(rows) == 60_000
    assert max(rows) - min(rows) <= 1  # row ranges split evenly
    # a count asked for is kept as it is, and the plan depends on the data alone
    assert len(plan_tasks(index, max(1, size // 9), min_tasks=11)) == 11
    assert plan_tasks(index, max(1, size // 13)) == plan_tasks(
        index_dataset(str(tmp_path / "pq"), "parquet"), max(1, size // 13)
    )


def test_eight_or_fewer_tasks_are_left_as_the_work_asks(tmp_path: Path) -> None:
    index = index_dataset(str(_parquet(tmp_path, 2_000, 2)), "parquet")
    assert len(plan_tasks(index, 2**40)) == 1  # a small input, little work: one task
    assert len(plan_tasks(index, max(1, index.num_bytes // 5))) == 5
