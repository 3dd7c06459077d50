"""Parquet (formats/parquet/format.py): row groups as units, projection, schema conformance,
truncated, fake and corrupt files named (row group included) or quarantined."""

from __future__ import annotations

from pathlib import Path

import _formatdata as fd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import FormatError
from shardwise.formats import Quarantine, get_format
from shardwise.index import index_dataset


def test_parquet_round_trip_keeps_types_and_row_groups(tmp_path: Path) -> None:
    table = fd.table(250)
    written = fd.write("parquet", str(tmp_path / "p"), table, batch_rows=30, row_group_rows=100)
    assert len(written) == 1
    units = fd.units("parquet", [written[0].path])
    assert [u.num_samples for u in units] == [100, 100, 50]
    assert [u.index for u in units] == [0, 1, 2]
    assert get_format("parquet").read_schema(written[0].path) == table.schema
    # column projection returns only the asked columns, in the unit's rows
    fmt = get_format("parquet")
    got = [b for b in fmt.read_unit(units[1], columns=["text", "id"])]
    proj = pa.Table.from_batches(got)
    assert proj.column_names == ["text", "id"]
    assert proj.column("id").to_pylist() == list(range(100, 200))


def test_parquet_row_groups_are_units_and_projection(tmp_path: Path) -> None:
    w = get_format("parquet").open_writer(
        str(tmp_path / "p"), row_group_rows=64, target_shard_bytes=1 << 30
    )
    w.write(fd.batch(1000))
    [f] = w.close()
    assert pq.ParquetFile(f.path).metadata.num_row_groups == 16
    index = index_dataset(str(tmp_path), progress=False)
    assert [u.num_samples for u in index.units] == [64] * 15 + [40]
    batches = list(
        get_format("parquet").read_unit(index.units[3], columns=["id"], schema=index.schema)
    )
    assert batches[0].schema.names == ["id"]
    assert batches[0].column(0).to_pylist()[:2] == [192, 193]


def test_parquet_read_unit_conforms_to_dataset_schema(tmp_path: Path) -> None:
    path = tmp_path / "narrow.parquet"
    pq.write_table(pa.table({"id": pa.array([1, 2], pa.int32())}), path)
    fmt = get_format("parquet")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    wide = pa.schema([("id", pa.int64()), ("extra", pa.string())])
    (batch,) = list(fmt.read_unit(unit, schema=wide))
    assert batch.schema == wide
    assert batch.to_pylist() == [{"id": 1, "extra": None}, {"id": 2, "extra": None}]


# --------------------------------------------------------------------------- bad files


@pytest.mark.parametrize("cut", [1, 8, 300])
def test_truncated_parquet_is_a_format_error(tmp_path: Path, cut: int) -> None:
    root = tmp_path / "ds"
    root.mkdir()
    pq.write_table(fd.table(500), root / "good.parquet", row_group_size=100)
    data = (root / "good.parquet").read_bytes()
    (root / "bad.parquet").write_bytes(data[:-cut])
    with pytest.raises(FormatError) as err:
        index_dataset(str(root), progress=False, cache_dir=str(tmp_path / "cache"))
    assert str(root / "bad.parquet") in str(err.value)
    assert "good.parquet" not in str(err.value)


def test_parquet_cut_inside_the_footer_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "t.parquet"
    pq.write_table(pa.table({"x": list(range(1000))}), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 20])
    with pytest.raises(FormatError) as info:
        index_dataset(str(path), progress=False)
    assert str(path) in str(info.value)


def test_parquet_that_is_not_parquet(tmp_path: Path) -> None:
    path = tmp_path / "x.parquet"
    path.write_bytes(b"PAR1 this is not really parquet")
    with pytest.raises(FormatError, match="x.parquet"):
        get_format("parquet").list_units(str(path), path.stat().st_size)


def test_parquet_corrupt_row_group_is_named_and_quarantined(tmp_path: Path) -> None:
    path = tmp_path / "c.parquet"
    pq.write_table(fd.incompressible_table(300), path, row_group_size=100, compression="snappy")
    fmt = get_format("parquet")
    units = fmt.list_units(str(path), path.stat().st_size)
    md = pq.ParquetFile(path).metadata
    col = md.row_group(1).column(1)
    start = col.dictionary_page_offset or col.data_page_offset
    data = bytearray(path.read_bytes())
    data[start : start + col.total_compressed_size] = b"\xa5" * col.total_compressed_size
    path.write_bytes(bytes(data))
    assert [u.num_samples for u in fmt.list_units(str(path), len(data))] == [
        100,
        100,
        100,
    ]  # footer intact
    assert sum(b.num_rows for b in fmt.read_unit(units[0])) == 100
    with pytest.raises(FormatError) as err:
        list(fmt.read_unit(units[1]))
    assert str(path) in str(err.value) and "row group 1" in str(err.value)
    q = Quarantine()
    assert list(fmt.read_unit(units[1], on_error="skip", quarantine=q)) == []
    assert q.count == 100 and q.examples[0][1] == "row group 1"
