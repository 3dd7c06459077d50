"""The checks a unit read makes of every column, worked out once per schema: a later unit
of the same schema is still checked value by value, and a wide table is read the same."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import FormatError
from shardwise.formats import Unit, get_format
from shardwise.formats.parquet import _leaves
from shardwise.loader.read.values import check_values, without_views

UNIT = Unit("f.parquet", 0, 2, 0, 0, 0)


def _dates(days: list[int]) -> pa.Table:
    return pa.table({"id": [1, 2], "day": pa.array(days, pa.date32())})


def test_a_later_unit_of_the_same_schema_is_still_checked() -> None:
    check_values(_dates([0, 1]), UNIT, "row group 0")  # the schema's checks worked out
    bad = _dates([0, 3_000_000])  # after the year 9999
    with pytest.raises(FormatError, match="'day'.*years 1-9999"):
        check_values(bad, UNIT, "row group 1")
    check_values(bad, UNIT, "row group 1", dates=False)  # numpy batches keep datetime64
    nested = pa.table({"d": pa.array([[dt.date(2000, 1, 1)], []], pa.list_(pa.date32()))})
    check_values(nested, UNIT, "row group 0", dates=False)
    far = pa.array([[3_000_000], []], pa.list_(pa.int32())).cast(pa.list_(pa.date32()))
    with pytest.raises(FormatError, match="batch_format='arrow'"):
        check_values(pa.table({"d": far}), UNIT, "row group 1", dates=False)


def test_text_of_a_later_unit_is_still_validated() -> None:
    good = pa.table({"s": pa.array(["a", "b"])})
    check_values(good, UNIT, "row group 0")
    raw = pa.array([b"a", b"\xff\xfe"], pa.binary())
    bad = pa.table({"s": pa.Array.from_buffers(pa.string(), 2, raw.buffers())})
    assert bad.schema.equals(good.schema)
    with pytest.raises(FormatError, match="not UTF-8"):
        check_values(bad, UNIT, "row group 1")


def test_views_of_a_later_table_of_the_same_schema_are_still_cast() -> None:
    for values in (["a", "b"], ["c", None]):
        table = pa.table({"s": pa.array(values, pa.string_view()), "n": [1, 2]})
        out = without_views(table)
        assert out.schema.field("s").type == pa.large_string()
        assert out.column("s").to_pylist() == values
    plain = pa.table({"s": ["a"]})
    assert without_views(plain) is plain


def test_a_wide_table_reads_as_arrow_reads_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n = 600
    cols: dict[str, pa.Array] = {
        f"x{i}": pa.array(rng.random(n).astype(np.float32)) for i in range(40)
    }
    cols["emb"] = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.random(n * 4).astype(np.float32)), 4
    )
    cols["tokens"] = pa.array([list(range(i % 7 + 1)) for i in range(n)], pa.list_(pa.int32()))
    cols["image"] = pa.array([bytes(rng.integers(0, 256, 2048, dtype=np.uint8)) for _ in range(n)])
    path = tmp_path / "wide.parquet"
    pq.write_table(pa.table(cols), path, row_group_size=100)
    fmt = get_format("parquet")
    units = fmt.list_units(str(path), path.stat().st_size)
    for columns in (None, ["x3", "tokens", "x39", "image"], ["emb", "x0"]):
        for unit in units:
            got = fmt.read_table(unit, columns=columns)
            want = pq.ParquetFile(path).read_row_group(unit.index, columns=columns)
            assert got.equals(want), (columns, unit.index)


def test_an_unhashable_schema_is_planned_uncached(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = pa.schema(
        [("a", pa.list_(pa.int32())), ("b", pa.int64()), ("c", pa.list_(pa.float64()))]
    )

    def unhashable(*args: object) -> object:
        raise TypeError("unhashable")

    unhashable.__wrapped__ = _leaves._plan.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(_leaves, "_plan", unhashable)
    lists = lambda t: pa.types.is_list(t)  # noqa: E731
    assert _leaves._plan_of(schema, 3, lists, False) == ((0, 0, False), (2, 2, False))
    assert _leaves._plan_of(schema, 4, lists, False) == ()  # not the file's columns
