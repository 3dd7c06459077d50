"""Plain tars read straight from member bytes (formats/webdataset/_arrays.py, _plainwalk.py):
the batches equal the tarfile path's, value for value and batch for batch, for every mix of
present and missing fields, empty tars, 0-byte members, binary and large_binary schemas and
batch boundaries; headers the fast walk does not read exactly as tarfile hand the shard over
to the tarfile path, also in the middle of a shard."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.formats import Quarantine
from shardwise.formats.webdataset import WebDatasetFormat, _arrays, _plainwalk
from shardwise.formats.webdataset import format as wds_format

Member = tuple[str, bytes]


def _tar(path: Path, members: list[Member], fmt: int = tarfile.USTAR_FORMAT) -> Path:
    with tarfile.open(path, "w", format=fmt) as tf:
        for name, payload in members:
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tf.addfile(info, io.BytesIO(payload))
    return path


def _both(
    path: Path,
    batch_rows: int,
    columns: list[str] | None = None,
    schema: pa.Schema | None = None,
) -> tuple[list[pa.RecordBatch], list[pa.RecordBatch]]:
    """(read_unit's batches, the tarfile path's batches) of the whole shard."""
    fmt = WebDatasetFormat(batch_rows=batch_rows)
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    schema = schema if schema is not None else fmt.read_schema(str(path))
    got = list(fmt.read_unit(unit, columns=columns, schema=schema))
    names = ["__key__"] + [
        c for c in (columns if columns is not None else schema.names) if c != "__key__"
    ]
    out = pa.schema([schema.field(c) for c in names])
    want = list(fmt._read_tarfile(str(path), names, out, "raise", Quarantine(), 0))
    return got, want


def _same(got: list[pa.RecordBatch], want: list[pa.RecordBatch]) -> None:
    assert [b.num_rows for b in got] == [b.num_rows for b in want]
    for a, b in zip(got, want):
        a.validate(full=True)
        assert a.schema == b.schema and a.equals(b)


def _no_tarfile(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the tarfile path fail, so a test shows the fast path read the shard alone."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the tarfile path was used")

    monkeypatch.setattr(wds_format, "iter_samples", refuse)


def test_fields_present_and_missing_and_zero_byte_members(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    members = [
        ("a.jpg", b"J" * 700),
        ("a.cls", b"1"),
        ("b.cls", b""),  # 0 bytes: an empty value, not a null
        ("c.jpg", b""),
        ("c.txt", b"late field"),
        ("d/e.f.jpg", b"x" * 513),
    ]
    path = _tar(tmp_path / "mix.tar", members)
    got, want = _both(path, batch_rows=2)
    _same(got, want)
    rows = pa.Table.from_batches(got).to_pylist()
    assert rows[1] == {"__key__": "b", "cls": b"", "f.jpg": None, "jpg": None, "txt": None}
    assert rows[2]["jpg"] == b"" and rows[3]["__key__"] == "d/e"
    _no_tarfile(monkeypatch)
    fmt = WebDatasetFormat(batch_rows=2)
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    assert pa.Table.from_batches(list(fmt.read_unit(unit))).to_pylist() == rows


def test_projection_reads_only_the_named_columns_in_order(tmp_path: Path) -> None:
    path = _tar(
        tmp_path / "p.tar",
        [(f"{i}.{e}", b"%d%s" % (i, e.encode())) for i in range(5) for e in ("a", "b", "c")],
    )
    for cols in (["c", "a"], ["b"], ["__key__", "c"], []):
        got, want = _both(path, batch_rows=3, columns=cols)
        _same(got, want)
        assert got[0].schema.names == ["__key__"] + [c for c in cols if c != "__key__"]


def test_empty_tar_has_no_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _tar(tmp_path / "empty.tar", [])
    _no_tarfile(monkeypatch)
    fmt = WebDatasetFormat()
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    assert unit.num_samples == 0
    assert list(fmt.read_unit(unit, schema=pa.schema([("__key__", pa.string())]))) == []


def test_a_field_only_in_late_samples_is_null_before(tmp_path: Path) -> None:
    members = [(f"{i:04d}.txt", b"t") for i in range(50)] + [("0050.seg", b"s"), ("0050.txt", b"")]
    path = _tar(tmp_path / "late.tar", members)
    got, want = _both(path, batch_rows=16)
    _same(got, want)
    assert got[0].column("seg").null_count == 16 and got[-1].column("seg").null_count == 2


@pytest.mark.parametrize("binary", [pa.binary(), pa.large_binary()])
@pytest.mark.parametrize("key", [pa.string(), pa.large_string()])
def test_schema_types_are_kept(tmp_path: Path, binary: pa.DataType, key: pa.DataType) -> None:
    path = _tar(tmp_path / "t.tar", [("a.x", b"1"), ("b.y", b"22"), ("c.x", b"")])
    schema = pa.schema([("__key__", key), ("x", binary), ("y", binary), ("z", binary)])
    got, want = _both(path, batch_rows=2, schema=schema)
    _same(got, want)
    assert got[0].schema == schema and got[0].column("z").null_count == 2


@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 1024])
def test_batch_boundaries(tmp_path: Path, rows: int) -> None:
    path = _tar(tmp_path / "b.tar", [(f"{i:03d}.v", b"v" * i) for i in range(12)])
    got, want = _both(path, batch_rows=rows)
    _same(got, want)
    assert [b.num_rows for b in got][:-1] == [rows] * (len(got) - 1)


LONG = "d" * 120 + "/0003.jpg"  # needs a pax or GNU long-name header


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT])
def test_long_names_hand_over_to_tarfile_mid_shard(tmp_path: Path, fmt: int) -> None:
    members = [(f"{i:04d}.jpg", b"j%d" % i) for i in range(3)] + [(LONG, b"long")]
    members += [(f"{i:04d}.jpg", b"j%d" % i) for i in range(4, 9)]
    path = _tar(tmp_path / "long.tar", members, fmt)
    for rows in (1, 2, 3, 4, 100):
        got, want = _both(path, batch_rows=rows)
        _same(got, want)
    assert _plainwalk.scan(path.open("rb")) is None  # the walk gave up
    keys = pa.Table.from_batches(got)["__key__"].to_pylist()
    assert keys[3] == LONG[: -len(".jpg")] and len(keys) == 9


def test_gnu_and_ustar_headers_are_read_by_the_fast_walk(tmp_path: Path) -> None:
    members = [("x/0001.jpg", b"1"), ("x/0001.cls", b"2"), ("0002.cls", b"3")]
    for fmt in (tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        path = _tar(tmp_path / f"f{fmt}.tar", members, fmt)
        with path.open("rb") as f:
            assert _plainwalk.scan(f) == (2, ["cls", "jpg"])


def test_bad_checksum_and_odd_numbers_hand_over(tmp_path: Path) -> None:
    path = _tar(tmp_path / "c.tar", [("a.x", b"1"), ("b.x", b"2")])
    raw = bytearray(path.read_bytes())
    raw[1024 + 108] = ord("9")  # uid of the second header: not octal (tarfile refuses it)
    bad = tmp_path / "bad.tar"
    bad.write_bytes(bytes(raw))
    with bad.open("rb") as f:
        assert _plainwalk.scan(f) is None
    fmt = WebDatasetFormat(on_error="skip")
    (unit,) = fmt.list_units(str(bad), bad.stat().st_size)
    # the tarfile path's rule: the sample in progress at the damage is lost with the rest
    assert (unit.num_samples, unit.skipped) == (0, 1)
    q = Quarantine()
    assert list(fmt.read_unit(unit, on_error="skip", quarantine=q)) == [] and q.count == 1


def test_a_column_over_two_gib_hands_over(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(_arrays, "_TOO_BIG", 3)
    path = _tar(tmp_path / "big.tar", [("a.x", b"1234"), ("b.x", b"1")])
    got, want = _both(path, batch_rows=1)
    _same(got, want)
    schema = pa.schema([("__key__", pa.string()), ("x", pa.large_binary())])
    got, want = _both(path, batch_rows=1, schema=schema)
    _same(got, want)


NAMES = st.sampled_from(["jpg", "cls", "txt", "seg.png", "json"])


@st.composite
def _shards(draw: st.DrawFn) -> list[Member]:
    members: list[Member] = []
    for i in range(draw(st.integers(0, 12))):
        exts = draw(st.lists(NAMES, min_size=1, max_size=4, unique=True))
        for ext in exts:
            members.append((f"k{i:03d}.{ext}", draw(st.binary(max_size=1100))))
    return members


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(members=_shards(), rows=st.integers(1, 6), fmt=st.sampled_from([0, 1, 2]))
def test_random_tars_equal_the_tarfile_path(
    tmp_path: Path, members: list[Member], rows: int, fmt: int
) -> None:
    path = _tar(
        tmp_path / "r.tar",
        members,
        [tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT][fmt],
    )
    got, want = _both(path, batch_rows=rows)
    _same(got, want)
    assert sum(b.num_rows for b in got) == len({n.split(".")[0] for n, _ in members})


@st.composite
def _hostile(draw: st.DrawFn) -> list[tarfile.TarInfo | Member]:
    """Plain samples with, somewhere, members the fast walk hands over: a link, a '..'
    name, a repeated field, a key that comes back, a long name, a directory."""
    out: list[tarfile.TarInfo | Member] = list(draw(_shards()))
    odd: list[tarfile.TarInfo | Member] = [
        ("k000.jpg", b"again"),
        ("k900.x", b"1"),
        ("k900.x", b"2"),
        ("../up.x", b"u"),
        ("/abs.x", b"a"),
        ("d" * 110 + ".x", b"long"),
    ]
    link = tarfile.TarInfo("k901.lnk")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    folder = tarfile.TarInfo("dir")
    folder.type = tarfile.DIRTYPE
    for m in draw(st.lists(st.sampled_from([*odd, link, folder]), max_size=3)):
        out.insert(draw(st.integers(0, len(out))), m)
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(members=_hostile(), rows=st.integers(1, 4))
def test_hostile_tars_under_skip_equal_the_tarfile_path(
    tmp_path: Path, members: list[tarfile.TarInfo | Member], rows: int
) -> None:
    path = tmp_path / "h.tar"
    with tarfile.open(path, "w", format=tarfile.PAX_FORMAT) as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                info = tarfile.TarInfo(m[0])
                info.size = len(m[1])
                tf.addfile(info, io.BytesIO(m[1]))
    fmt = WebDatasetFormat(batch_rows=rows, on_error="skip")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    schema = fmt.read_schema(str(path))
    q_fast, q_slow = Quarantine(), Quarantine()
    got = list(fmt.read_unit(unit, on_error="skip", quarantine=q_fast, schema=schema))
    want = list(fmt._read_tarfile(str(path), schema.names, schema, "skip", q_slow, 0))
    _same(got, want)
    assert q_fast.count == q_slow.count == unit.skipped
    assert sum(b.num_rows for b in got) == unit.num_samples
