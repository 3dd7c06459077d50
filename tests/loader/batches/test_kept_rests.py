"""Head windows on units read whole for their heads: tar shards and JSONL are read once,
their rests kept from their heads' reads until the rest windows take them; Parquet under a
filter (and a Parquet source among several) reads its rests again; the batches are the
plan's; over the budget, or after the reading is closed, a rest is read again."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from _loaderdata import make_parquet

from shardwise import StreamingDataset
from shardwise.formats import get_format
from shardwise.loader.batches import kept_rests
from shardwise.loader.batches.kept_rests import KeptRests, keeps_rests
from shardwise.loader.read.units import UnitReader

N = 3000


def test_a_rest_comes_from_its_heads_read_once_within_the_budget() -> None:
    tables = {u: pa.table({"x": np.arange(100) + 1000 * u}) for u in range(3)}
    reads: Counter[int] = Counter()

    def whole(u: int) -> pa.Table:
        reads[u] += 1
        return tables[u]

    kept = KeptRests(whole, 10**6)
    assert kept.part(0, 0, 30, 100).equals(tables[0].slice(0, 30))
    assert kept.held_bytes() == tables[0].get_total_buffer_size()
    assert kept.part(0, 30, 100, 100).equals(tables[0].slice(30))
    assert reads[0] == 1 and kept.held_bytes() == 0
    assert kept.part(0, 30, 100, 100).equals(tables[0].slice(30)) and reads[0] == 2  # once
    assert kept.part(1, 0, 100, 100).equals(tables[1]) and kept.held_bytes() == 0  # no rest
    small = KeptRests(whole, tables[2].get_total_buffer_size() - 1)  # over the budget
    small.part(2, 0, 10, 100)
    assert small.part(2, 10, 100, 100).equals(tables[2].slice(10)) and reads[2] == 2
    kept.part(2, 0, 10, 100)
    kept.close()
    assert kept.held_bytes() == 0 and kept.part(2, 10, 100, 100).equals(tables[2].slice(10))
    kept.part(1, 0, 10, 100)  # after close: nothing kept
    assert kept.held_bytes() == 0 and reads[2] == 4


def _jsonl(root: Path) -> Path:
    writer = get_format("jsonl").open_writer(str(root / "j"), target_shard_bytes=20_000)
    ids = np.arange(N)
    writer.write(pa.record_batch({"id": ids, "text": [f"doc {i}" for i in ids]}))
    writer.close()
    return root


def _tars(root: Path) -> Path:
    writer = get_format("webdataset").open_writer(str(root / "t"), target_shard_bytes=40_000)
    keys = [f"{i:06d}" for i in range(N)]
    writer.write(pa.record_batch({"__key__": keys, "txt": [f"doc {k}".encode() for k in keys]}))
    writer.close()
    return root


@pytest.fixture(scope="module", params=["jsonl", "webdataset", "filter"])
def shaped(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp(request.param)
    if request.param == "jsonl":
        return _jsonl(root), dict(format="jsonl", unit_bytes=8_000), "id"
    if request.param == "webdataset":
        return _tars(root), dict(format="webdataset"), "__key__"
    data = make_parquet(root / "ds", N, files=3, seed=2)
    return data, dict(filter=pc.field("label") != 3), "id"


def _planned(ds: Any, key: str) -> list[list[Any]]:
    reader = UnitReader(ds.index, [key], filter=ds.filter)
    keys = [reader.read(u).column(key).to_pylist() for u in range(ds.index.num_units)]
    return [[keys[u][r] for u, r in b] for b in ds.plan(num_workers=1).rank_batches(0)]


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("fmt", ["numpy", "arrow"])
def test_tars_and_jsonl_read_each_unit_once_and_the_batches_are_the_plans(
    shaped: Any, whole_reads: Counter[int], threads: int, fmt: str
) -> None:
    """Tars and JSONL keep their rests; Parquet under a filter reads them again (kept, its
    peak memory broke the loader's bound)."""
    data, kw, key = shaped
    ds = StreamingDataset(
        str(data),
        batch_size=16,
        seed=3,
        batch_format=fmt,
        first_window="heads",
        interleave=4,
        num_threads=threads,
        **kw,
    )
    assert ds.blocks > 1 and ds.index.num_units > 8
    got = [
        [str(k) for k in (b.column(key).to_pylist() if fmt == "arrow" else np.asarray(b[key]))]
        for b in ds
    ]
    reads = dict(whole_reads)
    assert got == [[str(k) for k in b] for b in _planned(ds, key)]
    if "filter" in kw:
        assert reads == {u: 2 for u in range(ds.index.num_units)}
        return
    # a head and its rest: one read (a rest whose head's read was taken off the queue but
    # not begun when the rest's began reads the unit again: rare, never wrong)
    assert set(reads) == set(range(ds.index.num_units)) and max(reads.values()) <= 2
    assert sum(reads.values()) <= ds.index.num_units + 2


def test_without_room_the_rests_are_read_again(
    shaped: Any, whole_reads: Counter[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    data, kw, key = shaped
    monkeypatch.setattr(kept_rests, "SHARE", 0.0)
    ds = StreamingDataset(
        str(data), batch_size=16, seed=3, batch_format="numpy", first_window="heads", **kw
    )
    got = [[str(k) for k in np.asarray(b[key])] for b in ds]
    reads = dict(whole_reads)
    assert got == [[str(k) for k in b] for b in _planned(ds, key)]
    assert reads == {u: 2 for u in range(ds.index.num_units)}


def test_several_sources_keep_the_rests_of_their_jsonl_units(
    tmp_path: Path, whole_reads: Counter[int]
) -> None:
    from shardwise import Source
    from shardwise.loader.read.mixed import unit_reader

    ids = np.arange(N)
    table = pa.table({"id": ids, "text": [f"doc {i}" for i in ids]})
    (tmp_path / "pq").mkdir()
    pq.write_table(table, tmp_path / "pq" / "a.parquet", row_group_size=250)
    jsonl = _jsonl(tmp_path / "js")
    ds = StreamingDataset(
        [
            Source(str(tmp_path / "pq"), name="pq"),
            Source(str(jsonl), name="js", format="jsonl", unit_bytes=8_000),
        ],
        batch_size=16,
        seed=3,
        batch_format="numpy",
        first_window="heads",
        interleave=4,
    )
    assert ds.blocks > 1
    keeps = keeps_rests(ds.index)
    parquet = ds.index.indexes[0].num_units
    assert [keeps(u) for u in (0, parquet - 1, parquet, ds.index.num_units - 1)] == [
        False,
        False,
        True,
        True,
    ]
    got = [np.asarray(batch["id"]).tolist() for batch in ds]
    reads = sum(whole_reads.values())
    reader = unit_reader(ds.index, ["id"], None, "raise", None)
    want = [reader.read(u).column("id").to_pylist() for u in range(ds.index.num_units)]
    assert got == [[want[u][r] for u, r in bt] for bt in ds.plan(num_workers=1).rank_batches(0)]
    jsonl_units = ds.index.num_units - parquet
    assert 2 * parquet + jsonl_units <= reads <= 2 * parquet + jsonl_units + 2
