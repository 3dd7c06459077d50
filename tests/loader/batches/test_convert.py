"""Every Arrow type a format can produce streams in per-sample and batched modes; values
that cannot become Python objects are errors naming file, unit and column; variable
length lists can be padded into tensors."""

from __future__ import annotations

import datetime as dt
import decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from shardwise.errors import ConfigError, FormatError
from shardwise.loader import StreamingDataset
from shardwise.loader.read.values import without_views

N = 40


def _with_nulls(values: list[Any]) -> list[Any]:
    return [None if i % 7 == 3 else v for i, v in enumerate(values)]


def _every_type() -> pa.Table:
    i = list(range(N))
    ts = [1_700_000_000_123_456_789 + k for k in i]
    cols: dict[str, pa.Array] = {
        "id": pa.array(i, pa.int64()),
        "flag": pa.array([k % 2 == 0 for k in i]),
        "flag_n": pa.array(_with_nulls([k % 3 == 0 for k in i]), pa.bool_()),
        "i8": pa.array([k - 20 for k in i], pa.int8()),
        "u16": pa.array(i, pa.uint16()),
        "i32_n": pa.array(_with_nulls(i), pa.int32()),
        "u64": pa.array(i, pa.uint64()),
        "f16": pa.array(np.arange(N, dtype=np.float16)),
        "f32": pa.array(i, pa.float32()),
        "f64_n": pa.array(_with_nulls([k / 3 for k in i]), pa.float64()),
        "dec": pa.array([decimal.Decimal(k) / 4 for k in i], pa.decimal128(10, 2)),
        "d32": pa.array([dt.date(2020, 1, 1) + dt.timedelta(days=k) for k in i], pa.date32()),
        "d64": pa.array([dt.date(1999, 12, 31) + dt.timedelta(days=k) for k in i], pa.date64()),
        "t32": pa.array([k * 1000 for k in i], pa.time32("ms")),
        "t64ns": pa.array([k * 1_000_000_001 for k in i], pa.time64("ns")),
        "ts_s": pa.array([1_700_000_000 + k for k in i], pa.timestamp("s")),
        "ts_ms_tz": pa.array(
            [1_700_000_000_000 + k for k in i], pa.timestamp("ms", tz="Europe/Paris")
        ),
        "ts_us_n": pa.array(
            _with_nulls([1_700_000_000_000_000 + k for k in i]), pa.timestamp("us")
        ),
        "ts_ns": pa.array(ts, pa.timestamp("ns")),
        "dur_ns": pa.array([k * 1_000_000_001 for k in i], pa.duration("ns")),
        "dur_s": pa.array(i, pa.duration("s")),
        "text_n": pa.array(_with_nulls([f"doc {k} é" for k in i])),
        "ltext": pa.array([f"x{k}" for k in i], pa.large_string()),
        "blob": pa.array([bytes([k]) * (k % 5) for k in i]),
        "fsb": pa.array([b"ab"] * N, pa.binary(2)),
        "ids": pa.array([list(range(k % 6)) for k in i], pa.list_(pa.int32())),
        "lids_n": pa.array(_with_nulls([list(range(k % 4)) for k in i]), pa.large_list(pa.int64())),
        "emb": pa.array([[float(k)] * 4 for k in i], pa.list_(pa.float32(), 4)),
        "tags": pa.array([[f"t{k}", None] for k in i], pa.list_(pa.string())),
        "st": pa.array(
            [{"a": k, "b": f"s{k}"} if k % 5 else None for k in i],
            pa.struct([("a", pa.int64()), ("b", pa.string())]),
        ),
        "mp": pa.array([[("k", k)] for k in i], pa.map_(pa.string(), pa.int64())),
        "cat": pa.array([f"c{k % 3}" for k in i]).dictionary_encode(),
        "nothing": pa.array([None] * N, pa.null()),
        # views: pyarrow has no take for them; the loader reads them as large_string / large_binary
        "sv_n": pa.array(_with_nulls([f"view {k} " * (k % 4) for k in i]), pa.string_view()),
        "bv": pa.array([bytes([k]) * (k % 15) for k in i], pa.binary_view()),
        "lsv": pa.array([[f"a{k}" * 7, None] for k in i], pa.list_(pa.string_view())),
        # lists Arrow's to_numpy refuses: each row converted as a column of its own
        "lt64ns": pa.array(
            _with_nulls([[k * 1_000_000_001] for k in i]), pa.list_(pa.time64("ns"))
        ),
        "lfsb": pa.array([[b"abcdefg"] * (k % 3) for k in i], pa.list_(pa.binary(7))),
    }
    return pa.table(cols)


@pytest.fixture(scope="module")
def every_type(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    root = tmp_path_factory.mktemp("types")
    table = _every_type()
    pq.write_table(table, root / "a.parquet", row_group_size=16)
    return root / "a.parquet", pq.read_table(root / "a.parquet")


def _dataset(path: Path, **kw: Any) -> Any:
    return StreamingDataset(str(path), shuffle=False, rank=0, world_size=1, num_workers=1, **kw)


def test_per_sample_mode_streams_every_type(every_type: tuple[Path, pa.Table]) -> None:
    path, table = every_type
    got = list(_dataset(path, batch_size=4))
    assert len(got) == N and [r["id"] for r in got] == list(range(N))
    for name in (
        "flag",
        "flag_n",
        "i8",
        "u16",
        "i32_n",
        "f32",
        "f64_n",
        "dec",
        "d32",
        "d64",
        "t32",
        "ts_s",
        "ts_ms_tz",
        "ts_us_n",
        "dur_s",
        "text_n",
        "ltext",
        "blob",
        "fsb",
        "tags",
        "st",
        "mp",
        "cat",
        "nothing",
        "sv_n",
        "bv",
        "lsv",
    ):
        assert [r[name] for r in got] == table.column(name).to_pylist(), name
    assert isinstance(got[0]["flag"], bool) and got[3]["flag_n"] is None
    # nanoseconds are kept exactly (numpy scalars), which datetime cannot
    assert [r["ts_ns"] for r in got] == list(table.column("ts_ns").to_numpy())
    assert got[5]["ts_ns"] == np.datetime64(1_700_000_000_123_456_794, "ns")
    assert got[2]["dur_ns"] == np.timedelta64(2_000_000_002, "ns")
    assert got[2]["t64ns"] == 2_000_000_002
    assert [list(r["ids"]) for r in got] == table.column("ids").to_pylist()
    lids = [r["lids_n"] for r in got]  # large lists too: numpy rows of their dtype, None if null
    assert all(x is None or (isinstance(x, np.ndarray) and x.dtype == np.int64) for x in lids)
    assert [None if x is None else x.tolist() for x in lids] == table.column("lids_n").to_pylist()
    assert np.array_equal(
        np.stack([r["emb"] for r in got]),
        table.column("emb").to_numpy(zero_copy_only=False).tolist(),
    )


@pytest.mark.parametrize("fmt", ["numpy", "torch", "arrow"])
def test_batched_modes_stream_every_type(every_type: tuple[Path, pa.Table], fmt: str) -> None:
    path, table = every_type
    batches = list(_dataset(path, batch_size=8, batch_format=fmt))
    assert len(batches) == N // 8
    if fmt == "arrow":  # views come as their large_string / large_binary equivalents
        assert pa.Table.from_batches(batches).equals(without_views(table).combine_chunks())
        return
    ids = np.concatenate([np.asarray(b["id"]) for b in batches])
    assert ids.tolist() == list(range(N))
    flags = np.concatenate([np.asarray(b["flag"]) for b in batches])
    assert flags.dtype == np.bool_ and flags.tolist() == table.column("flag").to_pylist()
    emb = np.concatenate([np.asarray(b["emb"]) for b in batches])
    assert emb.shape == (N, 4)
    times = [r for b in batches for r in b["lt64ns"]]
    want = table.column("lt64ns").cast(pa.list_(pa.int64())).to_pylist()
    assert [None if r is None else r.tolist() for r in times] == want
    assert [r.tolist() for b in batches for r in b["lfsb"]] == table.column("lfsb").to_pylist()


def test_times_of_day_keep_their_unit_in_numpy_and_torch_batches(tmp_path: Path) -> None:
    """The time since midnight as ``timedelta64`` in the column's unit (NaT for a null),
    as a duration column comes; torch batches give it as durations: a list."""
    pq.write_table(
        pa.table(
            {
                "id": [0, 1, 2],
                "t_ms": pa.array([15_409_000, None, 1], pa.time32("ms")),
                "t_us": pa.array([15_409_000_000, 2, 1], pa.time64("us")),
                "dur_us": pa.array([15_409_000_000, 2, 1], pa.duration("us")),
            }
        ),
        tmp_path / "t.parquet",
    )
    (batch,) = _dataset(tmp_path / "t.parquet", batch_size=3, batch_format="numpy")
    t_ms, t_us = np.asarray(batch["t_ms"]), np.asarray(batch["t_us"])
    assert t_ms.dtype == np.dtype("m8[ms]") and t_us.dtype == np.dtype("m8[us]")
    assert t_ms[0] == np.timedelta64(4 * 3600 + 16 * 60 + 49, "s") and np.isnat(t_ms[1])
    assert t_us.tolist() == np.asarray(batch["dur_us"]).tolist()
    (batch,) = _dataset(tmp_path / "t.parquet", batch_size=3, batch_format="torch")
    assert batch["t_ms"] == [dt.timedelta(seconds=15409), None, dt.timedelta(milliseconds=1)]
    assert batch["t_us"] == batch["dur_us"]


@pytest.mark.parametrize("kind", ["fixed", "list"])
def test_a_sample_of_numbers_is_the_same_whatever_rows_share_its_batch(
    tmp_path: Path, kind: str
) -> None:
    """A null among a row's numbers makes that row float64 with NaN, not its neighbours:
    row 0 is int32 also where it pads a batch with the row holding the null."""
    t = pa.list_(pa.int32(), 2) if kind == "fixed" else pa.list_(pa.int32())
    table = pa.table({"id": [0, 1, 2], "v": pa.array([[1, 2], [3, 4], [None, 6]], t)})
    pq.write_table(table, tmp_path / "n.parquet")
    ds = StreamingDataset(
        str(tmp_path), batch_size=2, shuffle=False, drop_last=False, rank=0, world_size=1
    )
    got = [(s["id"], s["v"]) for s in ds]
    assert [i for i, _ in got] == [0, 1, 2, 0]  # the last batch padded with row 0
    for i, v in got:
        want = np.array([np.nan, 6.0]) if i == 2 else np.array(table["v"][i].as_py(), np.int32)
        assert v.dtype == want.dtype and np.array_equal(v, want, equal_nan=True), (i, v)


def test_per_sample_numeric_lists_are_numpy_rows_whatever_their_neighbours(
    tmp_path: Path,
) -> None:
    """Every row of a numeric list column is a numpy row of its dtype (None for a null
    row): neither a null row nor rows of other lengths beside it make it a Python list."""
    table = pa.table(
        {
            "id": list(range(6)),
            "fixed": pa.array(
                [[1, 2], None, [3, 4], [5, 6], [7, 8], [9, 10]], pa.list_(pa.int64(), 2)
            ),
            "ragged": pa.array([[1], [2, 3], [], [4, 5, 6], [7], [8, 9]], pa.list_(pa.int32())),
            "flags": pa.array([[True], [False, True], [True]] * 2, pa.list_(pa.bool_())),
        }
    )
    pq.write_table(table, tmp_path / "l.parquet")
    got = list(_dataset(tmp_path / "l.parquet", batch_size=3))
    assert [s["id"] for s in got] == list(range(6))
    assert got[1]["fixed"] is None
    for name, dtype in (("fixed", np.int64), ("ragged", np.int32), ("flags", np.bool_)):
        for s, want in zip(got, table.column(name).to_pylist()):
            if want is not None:
                assert isinstance(s[name], np.ndarray), (name, s["id"], s[name])
                assert s[name].dtype == dtype and s[name].tolist() == want


def test_per_sample_lists_with_null_numbers_are_float64_with_nan_booleans_too(
    tmp_path: Path,
) -> None:
    table = pa.table(
        {
            "id": list(range(4)),
            "flags": pa.array([[True, None], [False], None, [None]], pa.list_(pa.bool_())),
            "ints": pa.array([[1, None], [2], [3], None], pa.list_(pa.int16())),
        }
    )
    pq.write_table(table, tmp_path / "n.parquet")
    got = list(_dataset(tmp_path / "n.parquet", batch_size=2))
    for name in ("flags", "ints"):
        rows = [s[name] for s in got]
        assert rows[0].dtype == np.float64 and rows[0][0] == 1 and np.isnan(rows[0][1]), name
        assert any(r is None for r in rows), name
        want = table.column(name).to_pylist()
        for row, w in zip(rows, want):
            if w is not None and None not in w:  # a row of no null keeps its dtype
                assert row.dtype != np.float64 and row.tolist() == w, name
    assert got[3]["flags"].dtype == np.float64 and np.isnan(got[3]["flags"][0])


def test_per_sample_values_outside_python_datetime_name_file_unit_and_column(
    tmp_path: Path,
) -> None:
    days = [0] * 20 + [3_000_000] + [0] * 19  # year 10184 in row group 1
    pq.write_table(
        pa.table({"id": list(range(40)), "when": pa.array(days, pa.date32())}),
        tmp_path / "d.parquet",
        row_group_size=16,
    )
    with pytest.raises(FormatError) as info:
        list(_dataset(tmp_path / "d.parquet", batch_size=4))
    message = str(info.value)
    assert "d.parquet" in message and "row group 1" in message and "'when'" in message
    batches = list(_dataset(tmp_path / "d.parquet", batch_size=4, batch_format="numpy"))
    assert np.concatenate([b["when"] for b in batches])[20] == np.datetime64(3_000_000, "D")


@pytest.mark.parametrize("batch_format", [None, "numpy", "torch"])
@pytest.mark.parametrize("large", [False, True])
def test_strings_that_are_not_utf8_name_file_unit_and_column(
    tmp_path: Path, batch_format: str | None, large: bool
) -> None:
    # Parquet readers do not check UTF-8: a damaged file (or a careless writer) can hold such bytes
    raw = pa.array(
        [b"ok"] * 20 + [b"\xb4bad"] + [b"ok"] * 19, pa.large_binary() if large else pa.binary()
    )
    text = raw.view(pa.large_string() if large else pa.string())
    pq.write_table(
        pa.table({"id": list(range(40)), "text": text}), tmp_path / "u.parquet", row_group_size=16
    )
    with pytest.raises(FormatError) as info:
        list(_dataset(tmp_path / "u.parquet", batch_size=4, batch_format=batch_format))
    message = str(info.value)
    assert (
        "u.parquet" in message
        and "row group 1" in message
        and "'text'" in message
        and "UTF-8" in message
    )
    arrow = list(
        _dataset(tmp_path / "u.parquet", batch_size=4, batch_format="arrow")
    )  # passed on as stored
    assert sum(b.num_rows for b in arrow) == 40


def test_int96_timestamps_from_spark_stream_exactly(tmp_path: Path) -> None:
    ns = [1_600_000_000_000_000_001 + 1000 * k for k in range(12)]
    pq.write_table(
        pa.table({"id": list(range(12)), "ts": pa.array(ns, pa.timestamp("ns"))}),
        tmp_path / "s.parquet",
        use_deprecated_int96_timestamps=True,
    )
    got = [r["ts"] for r in _dataset(tmp_path / "s.parquet", batch_size=3)]
    assert got == [np.datetime64(v, "ns") for v in ns]


def _tokens(tmp_path: Path) -> tuple[Path, list[list[int]]]:
    rng = np.random.default_rng(0)
    ids = [rng.integers(1, 1000, size=int(rng.integers(0, 30))).tolist() for _ in range(64)]
    pq.write_table(
        pa.table({"id": list(range(64)), "input_ids": pa.array(ids, pa.list_(pa.int32()))}),
        tmp_path / "tok.parquet",
        row_group_size=20,
    )
    return tmp_path / "tok.parquet", ids


@pytest.mark.parametrize("pad_to", ["longest", 12])
def test_variable_length_lists_are_padded_with_lengths(tmp_path: Path, pad_to: Any) -> None:
    import torch

    path, ids = _tokens(tmp_path)
    for batch in _dataset(path, batch_size=16, batch_format="torch", pad_to=pad_to):
        tokens, lengths = batch["input_ids"], batch["input_ids_lengths"]
        assert tokens.dtype == torch.int32 and lengths.dtype == torch.int64
        rows = [ids[int(i)] for i in batch["id"]]
        width = max(len(r) for r in rows) if pad_to == "longest" else pad_to
        assert tokens.shape == (16, width)
        for row, got, n in zip(rows, tokens.tolist(), lengths.tolist()):
            assert n == min(len(row), width)
            assert got == (row + [0] * width)[:width]


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_lists_of_booleans_are_padded_with_false(tmp_path: Path, fmt: str) -> None:
    flags = [[True], [False, True, None], None, []]
    pq.write_table(
        pa.table({"id": list(range(4)), "flags": pa.array(flags, pa.list_(pa.bool_()))}),
        tmp_path / "b.parquet",
    )
    (batch,) = _dataset(tmp_path / "b.parquet", batch_size=4, batch_format=fmt, pad_to="longest")
    values, lengths = np.asarray(batch["flags"]), np.asarray(batch["flags_lengths"])
    assert values.dtype == np.bool_ and lengths.tolist() == [1, 3, 0, 0]
    want = [[True, False, False], [False, True, False], [False] * 3, [False] * 3]
    assert values.tolist() == want


def test_without_padding_ragged_lists_stay_object_arrays_and_bad_pad_is_refused(
    tmp_path: Path,
) -> None:
    path, ids = _tokens(tmp_path)
    batch = next(iter(_dataset(path, batch_size=16, batch_format="numpy")))
    assert batch["input_ids"].dtype == object and "input_ids_lengths" not in batch
    for bad in (0, -1, "short", True):
        with pytest.raises(ConfigError, match="pad_to"):
            _dataset(path, batch_size=16, batch_format="numpy", pad_to=bad)


def _rows_by_id(batches: list[Any]) -> dict[str, list[Any]]:
    """Each column of numpy batches as Python values, in id order."""
    order = np.argsort(np.concatenate([np.asarray(b["id"]) for b in batches]))
    out: dict[str, list[Any]] = {}
    for name in batches[0]:
        values = [v for b in batches for v in np.asarray(b[name], dtype=object).tolist()]
        out[name] = [values[i] for i in order]
    return out


def _same(a: list[Any], b: list[Any]) -> bool:
    """Equal lists, a float NaN (a null in a numeric column) equal to itself."""

    def key(v: Any) -> Any:
        return "NaN" if isinstance(v, float) and v != v else v

    return [key(v) for v in a] == [key(v) for v in b]


@pytest.mark.parametrize("workers", [0, 2])
def test_numpy_batches_carry_every_type_exactly_through_worker_transport(
    every_type: tuple[Path, pa.Table], workers: int
) -> None:
    """Every column's values, not just a few, through the in-process threads and through
    DataLoader workers (shared-memory rings), shuffled: the values of the Parquet table,
    by the batch rules (nulls in numbers as pyarrow's to_numpy gives them)."""
    from torch.utils.data import DataLoader

    path, table = every_type
    ds = StreamingDataset(
        str(path), batch_size=4, shuffle=True, seed=2, rank=0, world_size=1, batch_format="numpy"
    )
    got = _rows_by_id(list(DataLoader(ds, batch_size=None, num_workers=workers)))
    assert got["id"] == list(range(N))
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_time(column.type):  # the time since midnight, in the column's unit
            time32 = pa.types.is_time32(column.type)
            counts = column.cast(pa.int32()).cast(pa.int64()) if time32 else column
            times = counts.view(pa.duration(column.type.unit)).to_numpy(zero_copy_only=False)
            want = times.astype(object).tolist()
        elif pa.types.is_fixed_size_list(column.type):
            want = column.to_pylist()
            got[name] = np.array(got[name]).tolist()
        elif pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            if pa.types.is_time64(column.type.value_type):  # timedelta64[ns]: equal to counts
                column = column.cast(pa.list_(pa.int64()))
            want = column.to_pylist()
            got[name] = [None if v is None else list(v) for v in got[name]]
        else:
            want = column.to_numpy(zero_copy_only=False).tolist()
        assert _same(got[name], want), name


@pytest.mark.parametrize("large", [False, True])
def test_ragged_lists_become_the_row_views_arrow_gives(large: bool) -> None:
    from shardwise.loader.batches.convert import column_to_numpy

    rows = [[1, 2, 3], [], [4], [5, 6], [7, 8, 9, 10]]
    t = pa.large_list(pa.int32()) if large else pa.list_(pa.int32())
    col = pa.array([[0], *rows], t).slice(1)  # offsets that do not start at 0
    got, want = column_to_numpy(col), col.to_numpy(zero_copy_only=False)
    assert got.dtype == object and len(got) == len(want) == len(rows)
    for g, w, r in zip(got, want, rows):
        assert g.dtype == w.dtype == np.int32 and g.tolist() == w.tolist() == r
        assert not g.flags.writeable and not w.flags.writeable
    equal = column_to_numpy(pa.array([[0, 0], [1, 2], [3, 4]], t).slice(1))  # one length
    assert equal.dtype == object and equal.shape == (2,)
    assert [r.tolist() for r in equal] == [[1, 2], [3, 4]]
    fixed = column_to_numpy(pa.array([[1, 2], [3, 4]], pa.list_(pa.int32(), 2)))
    assert fixed.shape == (2, 2) and fixed.tolist() == [[1, 2], [3, 4]]


@pytest.mark.parametrize("fmt", ["numpy", "torch"])
def test_a_list_column_has_one_form_in_every_batch(tmp_path: Path, fmt: str) -> None:
    """Rows of one length in one batch and not in the next: each batch's list column is an
    array of rows all the same (a 2-D array only with pad_to), whatever its values."""
    ids = [[1, 2], [3, 4], [5], [6, 7, 8], [], []]
    emb = [[float(k), 0.5] for k in range(6)]
    pq.write_table(
        pa.table(
            {
                "id": list(range(6)),
                "ids": pa.array(ids, pa.list_(pa.int64())),
                "emb": pa.array(emb, pa.list_(pa.float32())),
            }
        ),
        tmp_path / "l.parquet",
    )
    batches = list(_dataset(tmp_path / "l.parquet", batch_size=2, batch_format=fmt))
    assert len(batches) == 3
    for b in batches:
        for name in ("ids", "emb"):
            assert isinstance(b[name], np.ndarray) and b[name].dtype == object, name
            assert b[name].shape == (2,), name
    assert [r.tolist() for b in batches for r in b["ids"]] == ids
    padded = list(_dataset(tmp_path / "l.parquet", batch_size=2, batch_format=fmt, pad_to=2))
    assert all(tuple(b["emb"].shape) == (2, 2) for b in padded)
    assert np.concatenate([np.asarray(b["emb"]) for b in padded]).tolist() == emb


def test_the_first_epoch_of_numbers_strings_and_token_lists_does_not_import_pandas(
    tmp_path: Path,
) -> None:
    """pyarrow imports pandas on its first ``to_numpy`` or ``pa.array`` (about 0.3 CPU s of a
    fresh process, before its first batch): the loader's path calls neither."""
    import subprocess
    import sys

    n = 3000
    pq.write_table(
        pa.table(
            {
                "id": np.arange(n),
                "text": [f"row {i}" * (i % 5) for i in range(n)],
                "image": [bytes(5000 + i % 7) for i in range(n)],
                "tokens": pa.array([list(range(i % 9)) for i in range(n)], pa.list_(pa.int32())),
                "emb": pa.FixedSizeListArray.from_arrays(pa.array(np.ones(4 * n, np.float32)), 4),
            }
        ),
        tmp_path / "d.parquet",
        row_group_size=700,
    )
    code = (
        "import sys\n"
        "from shardwise.loader import StreamingDataset\n"
        "for cols in (['id', 'text', 'image', 'emb'], ['id', 'tokens']):\n"
        f"    ds = StreamingDataset({str(tmp_path)!r}, batch_size=64, batch_format='numpy',\n"
        "                          num_workers=None, columns=cols)\n"
        "    assert sum(len(b['id']) for b in ds) == 2944\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False", out.stderr
