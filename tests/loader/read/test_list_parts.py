"""Lists of numbers of any length (token ids) in a unit read in two parts: the head by an
Arrow reader of its own, the rest from its pages, each part equal to the whole read's rows
at every cut; a column whose head has a null or an empty list stays with Arrow, and one
whose rest the page reader declines is read there by Arrow."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise import StreamingDataset
from shardwise.loader.read import list_parts
from shardwise.loader.read.unit_heads import unit_parts
from shardwise.loader.read.units import UnitReader

GROUPS = (300, 41)  # rows of each row group


def _write(root: Path, column: Callable[[np.random.Generator, int], pa.Array], **kw: Any) -> Path:
    rng = np.random.default_rng(5)
    n = sum(GROUPS)
    table = pa.table({"id": np.arange(n), "tokens": column(rng, n)})
    with pq.ParquetWriter(root / "t.parquet", table.schema, **kw) as writer:
        writer.write_table(table.slice(0, GROUPS[0]))
        writer.write_table(table.slice(GROUPS[0]))
    return root


def _lists(
    t: pa.DataType, dtype: Any, empty: tuple[int, ...] = (), null: tuple[int, ...] = ()
) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        rows: list[Any] = [
            rng.integers(0, 500, int(k)).astype(dtype) for k in rng.integers(50, 400, n)
        ]
        for i in empty:
            rows[i] = np.zeros(0, dtype)
        for i in null:
            rows[i] = None
        return pa.array(rows, t)

    return make


def _check(root: Path, paged: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every unit in two parts at several cuts equals its whole read; the rest's lists came
    from the page reader (``paged``) or not."""
    calls: list[tuple[str, ...]] = []
    real = list_parts.read_var_lists

    def spy(*args: Any) -> dict[str, pa.Array]:
        out = real(*args)
        calls.append(tuple(out))
        return out

    monkeypatch.setattr(list_parts, "read_var_lists", spy)
    ds = StreamingDataset(str(root), batch_size=8, seed=1, first_window="heads")
    reader = UnitReader(ds.index)
    parts = unit_parts(ds.index, None, None, None, reader.schema)
    assert parts is not None
    for u in range(ds.index.num_units):
        whole, n = reader.read(u), ds.index.units[u].num_samples
        for cut in (n // 5, 1, n - 1):
            calls.clear()
            head = parts.head(u, cut)
            assert head is not None and head.equals(whole.slice(0, cut))
            held = parts._open[u].lists
            rest = parts.rest(u, cut, n - cut)
            assert rest is not None and rest.equals(whole.slice(cut)), (u, cut)
            assert rest.column("tokens").num_chunks == 1
            if paged:
                assert held == ["tokens"] and calls == [("tokens",)]


@pytest.mark.parametrize(
    "t, dtype",
    [
        (pa.list_(pa.int32()), np.int32),
        (pa.large_list(pa.int64()), np.int64),
        (pa.list_(pa.float32()), np.float32),
    ],
)
@pytest.mark.parametrize("dictionary", [True, False])
def test_the_rest_of_token_lists_comes_from_their_pages(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, t: pa.DataType, dtype: Any, dictionary: bool
) -> None:
    root = _write(tmp_path, _lists(t, dtype), use_dictionary=dictionary, data_page_size=4096)
    _check(root, True, monkeypatch)


def test_a_head_with_an_empty_or_null_list_stays_with_arrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = _write(tmp_path, _lists(pa.list_(pa.int32()), np.int32, empty=(0,), null=(301,)))
    _check(root, False, monkeypatch)
    ds = StreamingDataset(str(root), batch_size=8, seed=1, first_window="heads")
    parts = unit_parts(ds.index, None, None, None, UnitReader(ds.index).schema)
    assert parts is not None and parts.head(0, 5) is not None
    assert parts._open[0].lists == []  # the head has the empty list: Arrow reads both parts


def test_a_rest_the_page_reader_declines_is_read_by_arrow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Empty lists and nulls only past every head cut tried: the heads take the page path,
    the rests are declined by it and read by Arrow, and equal the whole read's rows."""
    root = _write(tmp_path, _lists(pa.list_(pa.int32()), np.int32, empty=(299,), null=(340,)))
    declined: list[list[str]] = []
    real = list_parts._arrow_rows

    def spy(pf: Any, group: int, names: list[str], lo: int, rows: int) -> pa.Table:
        if lo:
            declined.append(names)
        return real(pf, group, names, lo, rows)

    monkeypatch.setattr(list_parts, "_arrow_rows", spy)
    ds = StreamingDataset(str(root), batch_size=8, seed=1, first_window="heads")
    reader = UnitReader(ds.index)
    parts = unit_parts(ds.index, None, None, None, reader.schema)
    assert parts is not None
    for u, cut in ((0, 60), (1, 20)):
        whole, n = reader.read(u), ds.index.units[u].num_samples
        assert parts.head(u, cut) is not None and parts._open[u].lists == ["tokens"]
        rest = parts.rest(u, cut, n - cut)
        assert rest is not None and rest.equals(whole.slice(cut))
    assert declined == [["tokens"], ["tokens"]]


def test_token_lists_through_the_node_cache_equal_the_local_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Remote files read in parts through the node cache (leased entries, not a mapping):
    the rests' lists come from their pages there too, and the batches equal the local
    read's."""
    (tmp_path / "data").mkdir()
    local = _write(tmp_path / "data", _lists(pa.list_(pa.int32()), np.int32), data_page_size=4096)
    fs = fsspec.filesystem("memory")
    name = f"/listparts-{os.getpid()}-{id(tmp_path)}"
    fs.put(str(local / "t.parquet"), f"{name}/t.parquet")
    sources: list[str] = []
    real = list_parts.read_var_lists

    def spy(*args: Any) -> dict[str, pa.Array]:
        out = real(*args)
        sources.append(type(args[1]).__name__ if out else "declined")
        return out

    monkeypatch.setattr(list_parts, "read_var_lists", spy)
    kw: dict[str, Any] = dict(batch_size=8, seed=1, first_window="heads", batch_format="numpy")
    try:
        remote = StreamingDataset(
            f"memory://{name}", cache_dir=str(tmp_path / "cache"), cache_bytes=10**8, **kw
        )
        got = [[b["id"].tolist(), [t.tolist() for t in b["tokens"]]] for b in remote]
        read_by = set(sources)
    finally:
        fs.rm(name, recursive=True)
    want = [
        [b["id"].tolist(), [t.tolist() for t in b["tokens"]]]
        for b in StreamingDataset(str(local), **kw)
    ]
    assert got == want and len(got) > 10
    assert read_by == {"_LeasedFile"}  # the leased entries, by the page reader
