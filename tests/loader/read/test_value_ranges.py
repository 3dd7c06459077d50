"""Values numpy or Python cannot represent, in every batch format: a FormatError naming the
file, the row group and the column, or the value converted as the README promises.

The files stand in for parquet-testing's, which cannot be fetched at test time:
``nested_structs.rust.parquet`` holds a struct of timestamps in the year 52,951 (written
here by pyarrow as int64 microseconds); the others nest such timestamps in a list and a
map, or keep them as a column of their own.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import FormatError
from shardwise.loader import StreamingDataset

N = 40
BAD_ROW = 20  # in row group 1 (16 rows a group)
# 52951-06-01 in microseconds since 1970: what nested_structs.rust.parquet holds
YEAR_52951 = int(np.datetime64("52951-06-01", "us").astype(np.int64))
FINE = 1_700_000_000_000_000


def _micros() -> list[int]:
    return [YEAR_52951 if i == BAD_ROW else FINE + i for i in range(N)]


def _columns() -> dict[str, pa.Array]:
    ts = pa.array(_micros(), pa.timestamp("us"))
    structs = pa.StructArray.from_arrays([ts, pa.array(range(N), pa.int64())], ["at", "n"])
    lists = pa.ListArray.from_arrays(
        pa.array(range(0, 2 * N + 1, 2), pa.int32()), ts.take(np.repeat(np.arange(N), 2))
    )
    maps = pa.MapArray.from_arrays(
        pa.array(range(N + 1), pa.int32()), pa.array([f"k{i}" for i in range(N)]), ts
    )
    return {"nested_struct": structs, "nested_list": lists, "nested_map": maps, "top": ts}


def _file(tmp_path: Path, column: str) -> Path:
    path = tmp_path / f"{column}.parquet"
    table = pa.table({"id": pa.array(range(N), pa.int64()), column: _columns()[column]})
    pq.write_table(table, path, row_group_size=16)
    return path


def _read(path: Path, batch_format: str | None) -> list[Any]:
    ds = StreamingDataset(
        str(path), shuffle=False, rank=0, world_size=1, batch_size=4, batch_format=batch_format
    )
    return list(ds)


@pytest.mark.parametrize("batch_format", [None, "numpy", "torch", "arrow"])
@pytest.mark.parametrize("column", ["nested_struct", "nested_list", "nested_map"])
def test_nested_timestamps_in_year_52951_like_nested_structs_rust(
    tmp_path: Path, column: str, batch_format: str | None
) -> None:
    """Nested dates become Python objects in every format but Arrow's: a FormatError
    naming the file, row group 1 and the column (it was a raw ``ValueError: year 52951 is
    out of range`` in numpy batches, and per sample a FormatError without the file)."""
    path = _file(tmp_path, column)
    if batch_format == "arrow":
        got = pa.Table.from_batches(_read(path, "arrow"))
        assert got.column(column).equals(pq.read_table(path).column(column))
        return
    with pytest.raises(FormatError) as info:
        _read(path, batch_format)
    message = str(info.value)
    assert str(path) in message and "row group 1" in message and repr(column) in message
    assert "1-9999" in message and "'arrow'" in message


@pytest.mark.parametrize("batch_format", [None, "numpy", "torch", "arrow"])
def test_a_timestamp_column_in_year_52951(tmp_path: Path, batch_format: str | None) -> None:
    """A column of its own: numpy batches keep it exactly as datetime64 (the README's
    advice); per sample and in torch batches (where dates become Python objects) it is a
    FormatError naming the place; Arrow batches pass it on."""
    path = _file(tmp_path, "top")
    if batch_format in (None, "torch"):
        with pytest.raises(FormatError) as info:
            _read(path, batch_format)
        message = str(info.value)
        assert str(path) in message and "row group 1" in message and "'top'" in message
        return
    got = _read(path, batch_format)
    if batch_format == "numpy":
        values = np.concatenate([np.asarray(b["top"]) for b in got])
        assert values.dtype == np.dtype("datetime64[us]")
        assert values.astype(np.int64).tolist() == _micros()
    else:
        assert pa.Table.from_batches(got).column("top").cast(pa.int64()).to_pylist() == _micros()


def test_dates_inside_the_range_still_convert_nested(tmp_path: Path) -> None:
    path = tmp_path / "ok.parquet"
    ts = pa.array([FINE + i for i in range(N)], pa.timestamp("us"))
    pq.write_table(
        pa.table({"s": pa.StructArray.from_arrays([ts], ["at"])}), path, row_group_size=16
    )
    rows = _read(path, None)
    assert rows[3]["s"]["at"] == dt.datetime(2023, 11, 14, 22, 13, 20, 3)
