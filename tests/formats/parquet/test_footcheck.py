"""Footers whose column chunks would end the process in pyarrow's metadata accessors (an
unknown codec; level histograms that disagree with the schema) are refused by name where
the dataset is indexed, on both ways of indexing; the schema's levels as Arrow has them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from _parquetcraft import Reader, encode_struct, get
from hypothesis import given, settings
from hypothesis import strategies as st

from shardwise.formats.parquet._footcheck import FILE_SPEC, _levels, check_footer
from shardwise.formats.parquet._footer import footer_bytes, units_from_tail
from shardwise.formats.parquet._footwalk import walk


def _edit(path: Path, change: Any) -> None:
    """Rewrite the footer of ``path`` after ``change`` edits its decoded FileMetaData."""
    raw = path.read_bytes()
    n = int.from_bytes(raw[-8:-4], "little")
    meta = Reader(raw[-8 - n : -8]).struct()
    change(meta)
    footer = encode_struct(meta)
    path.write_bytes(raw[: -8 - n] + footer + len(footer).to_bytes(4, "little") + b"PAR1")


def _chunk_meta(meta: list[list[Any]], group: int = 0, column: int = 0) -> list[list[Any]]:
    rg = get(meta, 4)[2][1][group]
    return get(get(rg, 1)[2][1][column], 3)[2]  # type: ignore[no-any-return]


def _unknown_codec(meta: list[list[Any]]) -> None:
    get(_chunk_meta(meta, 0, 1), 4)[2] = 10


def _optional_made_required(meta: list[list[Any]]) -> None:
    element = next(e for e in get(meta, 2)[2][1] if get(e, 4)[2] == b"x")  # optional
    get(element, 3)[2] = 0  # REQUIRED: its definition histogram has one value too many


def _codec_given_twice(meta: list[list[Any]]) -> None:
    """Codec 10, then the codec's field again as a string, which Arrow's parser steps over:
    a walk that gave up on the string would leave the codec to Arrow's accessor."""
    chunk = _chunk_meta(meta, 0, 1)
    get(chunk, 4)[2] = 10
    chunk.insert(chunk.index(get(chunk, 4)) + 1, [4, 8, b""])


def _type_changed(meta: list[list[Any]]) -> None:
    get(_chunk_meta(meta, 0, 1), 1)[2] = 2  # 'x' is DOUBLE (5); its chunk now says INT64


def _table() -> pa.Table:
    return pa.table({"ids": pa.array([[1, 2], [3]], pa.list_(pa.int32())), "x": [1.0, None]})


@pytest.mark.parametrize(
    "damage", [_unknown_codec, _codec_given_twice, _optional_made_required, _type_changed]
)
@pytest.mark.parametrize("how", ["index", "list_units"])
def test_a_footer_that_would_abort_arrow_is_refused_by_name(
    tmp_path: Path, damage: Any, how: str
) -> None:
    """In a process of its own: the accessors would end it (SIGABRT) if reached."""
    path = tmp_path / "bad.parquet"
    pq.write_table(_table(), path, write_page_index=True)
    assert get(_chunk_meta(Reader(footer_bytes(path.read_bytes()).tobytes()).struct()), 16)
    _edit(path, damage)
    with pytest.raises(OSError):  # Arrow's own read reports it
        pq.read_table(path)
    call = (
        f"shardwise.open_dataset({str(path)!r})"
        if how == "index"
        else f"get_format('parquet').list_units({str(path)!r}, {path.stat().st_size})"
    )
    script = (
        "import shardwise\nfrom shardwise.formats import get_format\n"
        f"try:\n    {call}\nexcept shardwise.FormatError as exc:\n    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        env={"SHARDWISE_CACHE_DIR": str(tmp_path / "cache"), "PATH": ""},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"{path}, footer, row group 0, column 1: ")
    said = {
        _unknown_codec: "codec 10",
        _codec_given_twice: "codec 10",
        _optional_made_required: "level histogram",
    }
    assert said.get(damage, "physical type 2 is not its schema's 5") in done.stdout


def test_good_footers_pass_and_their_fields_read_as_written(tmp_path: Path) -> None:
    path = tmp_path / "ok.parquet"
    pq.write_table(_table(), path, row_group_size=1, compression="zstd", write_page_index=True)
    tail = footer_bytes(path.read_bytes())
    check_footer(tail, str(path))
    meta = walk(bytes(tail), FILE_SPEC)
    codecs = [[c["meta"]["codec"] for c in g["columns"]] for g in meta["row_groups"]]
    types = [[c["meta"]["type"] for c in g["columns"]] for g in meta["row_groups"]]
    sizes = [[c["meta"]["sizes"] for c in g["columns"]] for g in meta["row_groups"]]
    assert types == [[1, 5], [1, 5]]  # INT32 ids (in a list), DOUBLE x
    assert sizes[0] == [{"rep": 2, "def": 4}, {"rep": 0, "def": 2}]  # the histograms' lengths
    assert codecs == [[6, 6], [6, 6]]  # ZSTD, every chunk of both row groups


_TYPES = st.recursive(
    st.sampled_from([pa.int32(), pa.string(), pa.float64()]),
    lambda inner: st.one_of(
        st.builds(pa.list_, inner),
        st.builds(
            lambda a, b, n: pa.struct([pa.field("a", a, nullable=n), pa.field("b", b)]),
            inner,
            inner,
            st.booleans(),
        ),
        st.builds(lambda k, v: pa.map_(pa.string(), v), st.just(0), inner),
    ),
    max_leaves=6,
)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_TYPES, st.booleans()), min_size=1, max_size=4))
def test_the_schemas_levels_are_arrows(columns: list[tuple[pa.DataType, bool]]) -> None:
    schema = pa.schema([pa.field(f"c{i}", t, nullable=n) for i, (t, n) in enumerate(columns)])
    sink = pa.BufferOutputStream()
    pq.write_table(schema.empty_table(), sink)
    raw = sink.getvalue().to_pybytes()
    parquet_schema = pq.ParquetFile(pa.BufferReader(raw)).schema
    want = [
        (
            parquet_schema.column(i).max_definition_level,
            parquet_schema.column(i).max_repetition_level,
        )
        for i in range(len(parquet_schema))
    ]
    meta = walk(bytes(footer_bytes(raw)), FILE_SPEC)
    assert _levels(meta["schema"]) == want


@pytest.mark.parametrize("claimed", [30, 24_000])
def test_a_row_group_short_of_its_footers_rows_is_damage(tmp_path: Path, claimed: int) -> None:
    """The plan addresses the footer's rows: a row group that decodes to fewer is refused
    by name, or under ``skip`` quarantined whole (its claimed rows counted)."""
    from shardwise import FormatError
    from shardwise.formats import Quarantine, get_format

    path = tmp_path / "short.parquet"
    pq.write_table(pa.table({"id": range(24), "s": [f"r{i}" for i in range(24)]}), path)

    def lie(meta: list[list[Any]]) -> None:  # a lie the footer's values agree with
        group = get(meta, 4)[2][1][0]
        get(group, 3)[2] = claimed  # row_groups[0].num_rows
        for chunk in get(group, 1)[2][1]:
            get(get(chunk, 3)[2], 5)[2] = claimed  # each chunk's num_values

    _edit(path, lie)
    fmt = get_format("parquet")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    assert unit.num_samples == claimed
    with pytest.raises(
        FormatError, match=f"24 rows decoded where the footer counts {claimed}"
    ) as err:
        fmt.read_table(unit)
    assert (err.value.path, err.value.location) == (str(path), "row group 0")
    q = Quarantine()
    assert fmt.read_table(unit, on_error="skip", quarantine=q) is None
    assert q.count == claimed


@settings(max_examples=30, deadline=None)
@given(
    st.lists(_TYPES, min_size=1, max_size=3),
    st.integers(0, 40),
    st.integers(1, 16),
    st.sampled_from(["none", "zstd", "snappy"]),
)
def test_the_row_groups_sizes_are_arrows(
    columns: list[pa.DataType], rows: int, group: int, codec: str
) -> None:
    """The walk's rows and compressed bytes of each row group, which an index takes
    instead of Arrow's accessors, are what those accessors give (rows of nulls)."""
    schema = pa.schema([pa.field(f"c{i}", t) for i, t in enumerate(columns)])
    table = pa.Table.from_pylist([{}] * rows, schema=schema) if rows else schema.empty_table()
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, row_group_size=group, compression=codec)
    raw = sink.getvalue().to_pybytes()
    md = pq.ParquetFile(pa.BufferReader(raw)).metadata
    want = [
        (
            md.row_group(g).num_rows,
            sum(md.row_group(g).column(c).total_compressed_size for c in range(md.num_columns)),
        )
        for g in range(md.num_row_groups)
    ]
    assert check_footer(footer_bytes(raw), "x") == want
    tail = raw[max(0, len(raw) - len(footer_bytes(raw)) - 11) :]  # the footer and 3 bytes
    units, _ = units_from_tail("x", len(raw), tail)
    assert [(u.num_samples, u.num_bytes) for u in units] == want


def test_a_row_group_claiming_more_rows_than_its_values_is_refused_at_indexing(
    tmp_path: Path,
) -> None:
    """2**40 rows claimed in a file of a few rows: refused by name before a plan sizes its
    arrays by the claim (which would take terabytes)."""
    from shardwise import FormatError, open_dataset

    path = tmp_path / "huge.parquet"
    pq.write_table(_table(), path)

    def lie(meta: list[list[Any]]) -> None:
        get(get(meta, 4)[2][1][0], 3)[2] = 2**40  # row_groups[0].num_rows

    _edit(path, lie)
    with pytest.raises(
        FormatError, match="column 0: 3 values where the row group counts 1,099,511,627,776"
    ):
        open_dataset(str(path))


def test_a_schema_name_that_is_not_utf8_is_a_format_error(tmp_path: Path) -> None:
    from shardwise import FormatError, open_dataset

    path = tmp_path / "name.parquet"
    pq.write_table(_table(), path)

    def rename(meta: list[list[Any]]) -> None:
        element = next(e for e in get(meta, 2)[2][1] if get(e, 4)[2] == b"x")
        get(element, 4)[2] = b"\xe4x"

    _edit(path, rename)
    assert pq.read_table(path).num_rows == 2  # Arrow reads it; pyarrow cannot name it
    with pytest.raises(FormatError, match="a name in its schema is not UTF-8") as err:
        open_dataset(str(path))
    assert (err.value.path, err.value.location) == (str(path), "footer")
