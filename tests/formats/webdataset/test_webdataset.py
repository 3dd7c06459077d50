"""WebDataset (formats/webdataset/: format.py, _tarsafe.py): samples grouped by key, the writer's
encoding, headers checked while indexing (unsafe members, keys whose members are not
adjacent, repeated fields: refused naming file and member, or left out of the counts
under on_error="skip"), truncated and non-tar files, gzip-compressed shards."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile
from pathlib import Path

import _formatdata as fd
import pyarrow as pa
import pytest

from shardwise.cli import main
from shardwise.errors import FormatError, UnsafeMemberError
from shardwise.formats import Quarantine, get_format
from shardwise.index import index_dataset
from shardwise.loader import StreamingDataset

# --------------------------------------------------------------------------- round trips and
# grouping


def test_webdataset_round_trip(tmp_path: Path) -> None:
    table = fd.wds_table(40)
    written = fd.write("webdataset", str(tmp_path / "shard"), table, batch_rows=7)
    fd.check_written(written)
    paths = [w.path for w in written]
    back = fd.read("webdataset", paths)
    assert back.schema.names == ["__key__", "bin", "txt"]
    assert (
        back.schema.field("bin").type == pa.binary()
        and back.schema.field("txt").type == pa.binary()
    )
    expected = [
        {
            "__key__": r["__key__"],
            "bin": r["bin"],
            "txt": None if r["txt"] is None else r["txt"].encode("utf-8"),
        }
        for r in table.to_pylist()
    ]
    assert back.to_pylist() == expected
    # empty payloads survive as b"" (a member of size 0), not as null
    assert back.column("bin")[0].as_py() == b""


def test_webdataset_round_trip_groups_by_key(tmp_path: Path) -> None:
    keys = [f"sample{i:04d}" for i in range(50)]
    jpgs = [os.urandom(100 + i) for i in range(50)]
    batch = pa.record_batch(
        {
            "__key__": keys,
            "jpg": pa.array(jpgs, pa.binary()),
            "json": [json.dumps({"label": i}) for i in range(50)],
            "cls": pa.array([i % 3 for i in range(50)], pa.int64()),
        }
    )
    w = get_format("webdataset").open_writer(str(tmp_path / "shard"), target_shard_bytes=3_000)
    w.write(batch)
    files = w.close()
    assert len(files) > 3
    with tarfile.open(files[0].path) as tf:
        names = tf.getnames()
    assert names[:3] == ["sample0000.jpg", "sample0000.json", "sample0000.cls"]
    table = fd.read_everything(str(tmp_path))
    assert table.num_rows == 50
    assert table.column("__key__").to_pylist() == keys
    assert table.column("jpg").to_pylist() == jpgs
    assert json.loads(table.column("json")[7].as_py()) == {"label": 7}
    assert table.column("cls")[5].as_py() == b"2"


def test_webdataset_writer_encodes_numbers_and_structs_as_json(tmp_path: Path) -> None:
    table = pa.table(
        {
            "__key__": ["k1", "k2"],
            "cls": pa.array([3, None], pa.int64()),
            "meta": pa.array([{"a": 1, "s": "ü"}, {"a": 2, "s": "x"}]),
        }
    )
    written = fd.write("webdataset", str(tmp_path / "w"), table, batch_rows=2)
    with tarfile.open(written[0].path) as tf:
        names = tf.getnames()
        assert names == ["k1.cls", "k1.meta", "k2.meta"]
        assert tf.extractfile("k1.cls").read() == b"3"  # type: ignore[union-attr]
        assert json.loads(tf.extractfile("k1.meta").read()) == {"a": 1, "s": "ü"}  # type: ignore[union-attr]
        info = tf.getmember("k1.cls")
        assert (info.mtime, info.uid, info.gid, info.uname, info.mode) == (0, 0, 0, "", 0o644)


def test_webdataset_writer_rejects_a_sample_with_no_fields(tmp_path: Path) -> None:
    # a tar cannot hold an empty sample: the row would vanish while num_rows counted it
    writer = get_format("webdataset").open_writer(str(tmp_path / "w"))
    with pytest.raises(ValueError, match="'b'.*no non-null field"):
        writer.write(pa.record_batch({"__key__": ["a", "b"], "x": pa.array([b"1", None])}))


def test_webdataset_writer_needs_key_column(tmp_path: Path) -> None:
    writer = get_format("webdataset").open_writer(str(tmp_path / "w"))
    with pytest.raises(ValueError, match="__key__"):
        writer.write(pa.record_batch({"x": [b"a"]}))


def _tar(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tf:
        for m in members:
            if isinstance(m, tarfile.TarInfo):
                tf.addfile(m)
            else:
                name, payload = m
                info = tarfile.TarInfo(name)
                info.size = len(payload)
                tf.addfile(info, io.BytesIO(payload))
    return path


def _special(name: str, kind: bytes, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    return info


def test_samples_grouped_by_key(tmp_path: Path) -> None:
    path = _tar(
        tmp_path / "g.tar",
        [
            _special("imgs", tarfile.DIRTYPE),  # directories are ignored
            ("0001.jpg", b"\xff\xd8jpeg-1"),
            ("0001.json", b'{"label": 1}'),
            ("0002.jpg", b"\xff\xd8jpeg-2"),
            ("0003.json", b'{"label": 3}'),
            ("0003.jpg", b"\xff\xd8jpeg-3"),
            ("0004.seg.png", b"png-4"),  # key ends at the first dot of the basename
            ("0004.jpg", b"jpeg-4"),
            ("imgs/v1.2/0005.jpg", b"jpeg-5"),  # dots in directories do not split the key
        ],
    )
    fmt = get_format("webdataset", batch_rows=2)
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    assert unit.num_samples == 5
    assert fmt.read_schema(str(path)).names == ["__key__", "jpg", "json", "seg.png"]
    batches = list(fmt.read_unit(unit))
    assert [b.num_rows for b in batches] == [2, 2, 1]
    rows = pa.Table.from_batches(batches).to_pylist()
    assert rows == [
        {"__key__": "0001", "jpg": b"\xff\xd8jpeg-1", "json": b'{"label": 1}', "seg.png": None},
        {"__key__": "0002", "jpg": b"\xff\xd8jpeg-2", "json": None, "seg.png": None},
        {"__key__": "0003", "jpg": b"\xff\xd8jpeg-3", "json": b'{"label": 3}', "seg.png": None},
        {"__key__": "0004", "jpg": b"jpeg-4", "json": None, "seg.png": b"png-4"},
        {"__key__": "imgs/v1.2/0005", "jpg": b"jpeg-5", "json": None, "seg.png": None},
    ]
    # column projection keeps the key first
    proj = [r for b in fmt.read_unit(unit, columns=["json"]) for r in b.to_pylist()]
    assert proj[0] == {"__key__": "0001", "json": b'{"label": 1}'}
    with pytest.raises(ValueError, match="unknown columns"):
        list(fmt.read_unit(unit, columns=["nope"]))


# --------------------------------------------------------------------------- unsafe members and bad
# samples


UNSAFE = {
    "dotdot": (("../evil.txt", b"pwned"), "'..'"),
    "dotdot-nested": (("a/../../evil.txt", b"pwned"), "'..'"),
    "absolute": (("/etc/x", b"root"), "absolute"),
    "symlink": (_special("0002.lnk", tarfile.SYMTYPE, "/etc/passwd"), "symbolic link"),
    "hardlink": (_special("0002.hard", tarfile.LNKTYPE, "0001.txt"), "hard link"),
    "chardev": (_special("0002.dev", tarfile.CHRTYPE), "device"),
    "blockdev": (_special("0002.blk", tarfile.BLKTYPE), "device"),
    "fifo": (_special("0002.pipe", tarfile.FIFOTYPE), "FIFO"),
}


@pytest.mark.parametrize("kind", sorted(UNSAFE))
def test_unsafe_tar_member_raises_naming_tar_and_member(tmp_path: Path, kind: str) -> None:
    bad, reason = UNSAFE[kind]
    name = bad.name if isinstance(bad, tarfile.TarInfo) else bad[0]
    path = _tar(tmp_path / f"{kind}.tar", [("0001.txt", b"one"), bad, ("0003.txt", b"three")])
    fmt = get_format("webdataset")
    with pytest.raises(UnsafeMemberError) as at_index:  # refused while indexing already
        fmt.list_units(str(path), path.stat().st_size)
    assert f"member {name}" in str(at_index.value)
    (unit,) = get_format("webdataset", on_error="skip").list_units(str(path), path.stat().st_size)
    assert unit.num_samples == 2  # counted as reading will yield them
    with pytest.raises(UnsafeMemberError) as err:
        list(fmt.read_unit(unit))
    msg = str(err.value)
    assert str(path) in msg and f"member {name}" in msg and reason in msg
    assert err.value.path == str(path)
    # under skip the sample is quarantined and counted, the others are kept
    q = Quarantine()
    keys = [
        k
        for b in fmt.read_unit(unit, on_error="skip", quarantine=q)
        for k in b.column("__key__").to_pylist()
    ]
    assert keys == ["0001", "0003"]
    assert q.count == 1 and q.examples[0][:2] == (str(path), f"member {name}")


def _tar_with(path: Path, build: object) -> None:
    with tarfile.open(path, "w") as tf:
        ok = tarfile.TarInfo("0001.txt")
        ok.size = 2
        tf.addfile(ok, io.BytesIO(b"ok"))
        build(tf)  # type: ignore[operator]


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    m = tarfile.TarInfo(name)
    m.type = kind
    m.linkname = link
    return m


@pytest.mark.parametrize(
    "member,reason",
    [
        (_member("../evil.txt"), ".."),
        (_member("a/../../evil.txt"), ".."),
        (_member("/etc/evil.txt"), "absolute"),
        (_member("0002.txt", tarfile.SYMTYPE, "/etc/passwd"), "link"),
        (_member("0002.txt", tarfile.LNKTYPE, "0001.txt"), "link"),
        (_member("0002.dev", tarfile.CHRTYPE), "device"),
        (_member("0002.fifo", tarfile.FIFOTYPE), "fifo"),
    ],
)
def test_unsafe_tar_members_are_rejected_through_the_index(
    tmp_path: Path, member: tarfile.TarInfo, reason: str
) -> None:
    path = tmp_path / "shard.tar"

    def add(tf: tarfile.TarFile) -> None:
        if member.isreg():
            member.size = 4
            tf.addfile(member, io.BytesIO(b"evil"))
        else:
            tf.addfile(member)

    _tar_with(path, add)
    with pytest.raises(UnsafeMemberError) as info:
        fd.read_everything(str(path))
    msg = str(info.value)
    assert str(path) in msg and member.name in msg
    assert reason in msg.lower() or (reason == "device" and "special" in msg.lower())


def test_unsafe_member_never_touches_the_filesystem(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = _tar(work / "x.tar", [("../escaped.txt", b"pwned")])
    fmt = get_format("webdataset")
    with pytest.raises(UnsafeMemberError):
        fmt.list_units(str(path), path.stat().st_size)
    (unit,) = get_format("webdataset", on_error="skip").list_units(str(path), path.stat().st_size)
    with pytest.raises(UnsafeMemberError):
        list(fmt.read_unit(unit))
    assert not (tmp_path / "escaped.txt").exists()


def _typed_tar(path: Path, members: list[tuple[str, bytes, bytes]]) -> Path:
    """members: (name, data, type) with type tarfile.REGTYPE, SYMTYPE, LNKTYPE, CHRTYPE,
    FIFOTYPE."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
            else:
                info.linkname = "target.txt"
                tf.addfile(info)
    path.write_bytes(buf.getvalue())
    return path


def _good(n: int, start: int = 0) -> list[tuple[str, bytes, bytes]]:
    return [
        m
        for i in range(start, start + n)
        for m in (
            (f"s{i:03d}.txt", b"t%d" % i, tarfile.REGTYPE),
            (f"s{i:03d}.cls", b"%d" % (i % 3), tarfile.REGTYPE),
        )
    ]


BAD = {
    "dotdot": ("../evil.txt", tarfile.REGTYPE),
    "absolute": ("/etc/evil.txt", tarfile.REGTYPE),
    "symlink": ("link.txt", tarfile.SYMTYPE),
    "hardlink": ("hard.txt", tarfile.LNKTYPE),
    "device": ("dev.txt", tarfile.CHRTYPE),
    "fifo": ("pipe.txt", tarfile.FIFOTYPE),
}


@pytest.mark.parametrize("kind", sorted(BAD))
def test_unsafe_members_are_refused_while_indexing_and_skipped_exactly(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    name, typ = BAD[kind]
    path = _typed_tar(tmp_path / "a.tar", _good(5) + [(name, b"x", typ)] + _good(4, 5))
    with pytest.raises(UnsafeMemberError) as info:
        index_dataset(str(path), progress=False)
    assert "a.tar" in str(info.value) and name.lstrip("/") in str(info.value)
    assert main(["inspect", str(path)]) == 1
    assert name.lstrip("/") in capsys.readouterr().err
    index = index_dataset(str(path), progress=False, on_error="skip")
    assert (
        index.num_samples == 9 and index.units[0].skipped == 1 and index.summary()["skipped"] == 1
    )
    assert (
        index_dataset(str(path), progress=False, on_error="skip").units == index.units
    )  # saved, reused
    ds = StreamingDataset(
        str(path), batch_size=1, shuffle=False, on_error="skip", rank=0, world_size=1
    )
    assert [s["__key__"] for s in ds] == [f"s{i:03d}" for i in range(9)]
    assert ds.quarantine.count == 1


def test_repeated_field_in_a_sample_is_a_format_error(tmp_path: Path) -> None:
    path = _tar(tmp_path / "dup.tar", [("0001.txt", b"a"), ("0001.txt", b"b")])
    fmt = get_format("webdataset")
    with pytest.raises(FormatError, match="appears twice"):
        fmt.list_units(str(path), path.stat().st_size)
    (unit,) = get_format("webdataset", on_error="skip").list_units(str(path), path.stat().st_size)
    with pytest.raises(FormatError) as err:
        list(fmt.read_unit(unit))
    assert not isinstance(err.value, UnsafeMemberError)
    assert "appears twice" in str(err.value) and str(path) in str(err.value)


def test_key_that_comes_back_is_a_bad_sample_naming_the_key(tmp_path: Path) -> None:
    path = _tar(tmp_path / "r.tar", [("a.jpg", b"1"), ("b.jpg", b"2"), ("a.json", b"3")])
    with pytest.raises(FormatError, match="'a' has members that are not adjacent"):
        get_format("webdataset").list_units(str(path), path.stat().st_size)
    fmt = get_format("webdataset", on_error="skip")
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    q = Quarantine()
    keys = [
        k
        for b in fmt.read_unit(unit, on_error="skip", quarantine=q)
        for k in b.column("__key__").to_pylist()
    ]
    assert unit.num_samples == 2 and keys == ["a", "b"] and q.count == 1


def test_a_key_whose_members_are_not_adjacent_is_named(tmp_path: Path) -> None:
    members = _good(2) + [("s000.json", b"{}", tarfile.REGTYPE)] + _good(2, 2)
    path = _typed_tar(tmp_path / "b.tar", members)
    with pytest.raises(FormatError, match="'s000' has members that are not adjacent") as info:
        index_dataset(str(path), progress=False)
    assert "s000.json" in str(info.value)
    assert index_dataset(str(path), progress=False, on_error="skip", refresh=True).num_samples == 4


# --------------------------------------------------------------------------- truncated and non-tar
# files


def _three_sample_tar(tmp_path: Path) -> tuple[Path, bytes]:
    members = [(f"{k:04d}.{ext}", bytes([k]) * 700) for k in range(3) for ext in ("jpg", "json")]
    path = _tar(tmp_path / "full.tar", members)  # type: ignore[arg-type]
    return path, path.read_bytes()


# each member is a 512-byte header plus 1024 bytes of (padded) data
@pytest.mark.parametrize(
    "cut",
    [100, 512 + 300, 1536 * 2 + 200, 1536 * 3, 1536 * 5 + 700, 1536 * 6],
    ids=[
        "in-first-header",
        "in-first-data",
        "in-later-header",
        "at-header-boundary",
        "in-last-data",
        "no-end-marker",
    ],
)
def test_truncated_tar_is_a_format_error(tmp_path: Path, cut: int) -> None:
    full, data = _three_sample_tar(tmp_path)
    assert len(data) > 1536 * 6  # the end-of-archive blocks follow the members
    path = tmp_path / "cut.tar"
    path.write_bytes(data[:cut])
    fmt = get_format("webdataset")
    with pytest.raises(FormatError) as err:
        units = fmt.list_units(str(path), cut)
        for u in units:
            list(fmt.read_unit(u))
    assert str(path) in str(err.value)
    assert not isinstance(err.value, UnsafeMemberError)
    # the intact file is fine
    (unit,) = fmt.list_units(str(full), len(data))
    assert unit.num_samples == 3


# (cut, samples kept under on_error="skip"): the sample in progress at the damage is lost
# with the rest of the shard (more of its members may have followed), counted once
_SKIP_CUTS = [
    (512 + 300, 0),
    (1536 * 2 + 200, 0),
    (1536 * 3, 1),
    (1536 * 5 + 700, 2),
    (1536 * 6, 2),
]


@pytest.mark.parametrize("gz", [False, True], ids=["tar", "tar.gz"])
@pytest.mark.parametrize(
    ("cut", "kept"),
    _SKIP_CUTS,
    ids=["first-data", "later-header", "boundary", "last-data", "no-end"],
)
def test_truncated_plain_tar_under_skip_keeps_the_samples_before_the_cut(
    tmp_path: Path, cut: int, kept: int, gz: bool
) -> None:
    _, data = _three_sample_tar(tmp_path)
    path = tmp_path / ("cut.tar.gz" if gz else "cut.tar")
    path.write_bytes(gzip.compress(data[:cut], mtime=0) if gz else data[:cut])
    fmt = get_format("webdataset", on_error="skip")
    if gz:  # nothing of a damaged compressed shard is trusted: an error under "skip" too
        with pytest.raises(FormatError, match="cut.tar.gz"):
            fmt.list_units(str(path), path.stat().st_size)
        return
    (unit,) = fmt.list_units(str(path), path.stat().st_size)
    assert (unit.num_samples, unit.skipped) == (kept, 1)
    q = Quarantine()
    rows = [r for b in fmt.read_unit(unit, on_error="skip", quarantine=q) for r in b.to_pylist()]
    assert [r["__key__"] for r in rows] == [f"{k:04d}" for k in range(kept)]
    assert all(r["jpg"] == bytes([k]) * 700 == r["json"] for k, r in enumerate(rows))
    assert q.count == 1
    (where_path, where, reason) = q.examples[0]
    assert where_path == str(path) and "truncated" in reason and "rest of the shard" in reason
    assert where  # a place in the file: a header offset, a member or the end
    with pytest.raises(FormatError, match="cut.tar"):  # the default policy still refuses it
        get_format("webdataset").list_units(str(path), path.stat().st_size)


def test_truncated_shard_under_skip_streams_the_rest_of_the_dataset(tmp_path: Path) -> None:
    _, data = _three_sample_tar(tmp_path)
    (tmp_path / "a.tar").write_bytes(data)
    (tmp_path / "b.tar").write_bytes(data[: 1536 * 5 + 700])
    (tmp_path / "full.tar").unlink()
    index = index_dataset(str(tmp_path), progress=False, on_error="skip")
    assert index.num_samples == 5
    ds = StreamingDataset(
        str(tmp_path), batch_size=1, seed=1, rank=0, world_size=1, on_error="skip"
    )
    assert sorted(s["__key__"] for s in ds) == ["0000", "0000", "0001", "0001", "0002"]


def test_tar_cut_inside_member_data_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cut.tar"
    with tarfile.open(path, "w") as tf:
        for i in range(5):
            m = tarfile.TarInfo(f"{i:04d}.bin")
            m.size = 5000
            tf.addfile(m, io.BytesIO(os.urandom(5000)))
    data = path.read_bytes()
    path.write_bytes(data[:12_000])
    with pytest.raises(FormatError) as info:
        fd.read_everything(str(path))
    assert str(path) in str(info.value)


def test_tar_with_garbage_after_members_is_a_format_error(tmp_path: Path) -> None:
    full, data = _three_sample_tar(tmp_path)
    path = tmp_path / "junk.tar"
    path.write_bytes(data[: 1536 * 6] + b"\x01garbage" + b"\0" * 2048)
    with pytest.raises(FormatError, match="junk.tar"):
        get_format("webdataset").list_units(str(path), path.stat().st_size)


def test_empty_or_non_tar_file_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "nothing.tar"
    path.write_bytes(b"")
    with pytest.raises(FormatError, match="nothing.tar"):
        get_format("webdataset").list_units(str(path), 0)
    path.write_bytes(b"this is plainly not a tar archive" * 40)
    with pytest.raises(FormatError, match="nothing.tar"):
        get_format("webdataset").list_units(str(path), path.stat().st_size)


# --------------------------------------------------------------------------- gzip-compressed shards


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz"])
def test_gzip_compressed_shards_stream_whole(tmp_path: Path, suffix: str) -> None:
    import gzip

    for f in range(3):
        raw = _typed_tar(tmp_path / "raw.tar", _good(20, 20 * f)).read_bytes()
        (tmp_path / f"shard-{f}{suffix}").write_bytes(gzip.compress(raw))
    (tmp_path / "raw.tar").unlink()
    index = index_dataset(str(tmp_path), progress=False)
    assert index.format == "webdataset" and index.num_units == 3 and index.num_samples == 60
    ds = StreamingDataset(str(tmp_path), batch_size=4, seed=2, rank=0, world_size=1)
    got = [(s["__key__"], s["txt"]) for s in ds]
    assert sorted(got) == [(f"s{i:03d}", b"t%d" % i) for i in range(60)]
    (tmp_path / f"shard-1{suffix}").write_bytes((tmp_path / f"shard-1{suffix}").read_bytes()[:-40])
    with pytest.raises(FormatError, match=f"shard-1{suffix}"):
        index_dataset(str(tmp_path), progress=False, refresh=True)


def test_compressed_shard_cut_short_by_a_bad_header_is_an_error(tmp_path: Path) -> None:
    raw = bytearray(_typed_tar(tmp_path / "raw.tar", _good(20)).read_bytes())
    raw[10 * 1024 + 3] ^= (
        0x55  # member 10's name: its checksum no longer matches, tarfile stops there
    )
    for suffix, data in ((".tar", bytes(raw)), (".tar.gz", gzip.compress(bytes(raw), mtime=0))):
        (tmp_path / f"bad{suffix}").write_bytes(data)
        with pytest.raises(FormatError, match="unreadable data after the last member") as info:
            index_dataset(str(tmp_path / f"bad{suffix}"), progress=False)
        assert f"bad{suffix}" in str(info.value) and "offset 10240" in str(info.value)


@pytest.mark.parametrize("suffix", [".tar", ".tar.gz"])
def test_member_name_that_is_not_utf8_is_a_bad_sample(tmp_path: Path, suffix: str) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT, encoding="latin-1") as tf:
        for name in ("s000.txt", "s\xe9.txt", "s002.txt"):  # é as one Latin-1 byte: not UTF-8
            info = tarfile.TarInfo(name)
            info.size = 1
            tf.addfile(info, io.BytesIO(b"x"))
    path = tmp_path / f"latin{suffix}"
    path.write_bytes(gzip.compress(buf.getvalue()) if suffix == ".tar.gz" else buf.getvalue())
    with pytest.raises(FormatError, match="member name is not valid UTF-8") as info:
        index_dataset(str(path), progress=False)
    assert path.name in str(info.value)
    ds = StreamingDataset(
        str(path), batch_size=1, shuffle=False, on_error="skip", rank=0, world_size=1
    )
    assert [s["__key__"] for s in ds] == ["s000", "s002"] and ds.quarantine.count == 1


def test_a_field_first_seen_late_in_a_shard_is_a_column(tmp_path: Path) -> None:
    members = [
        (f"{i:04d}.{ext}", b"%d" % i, tarfile.REGTYPE)
        for i in range(400)
        for ext in ("txt", "seg")
        if ext == "txt" or i == 350
    ]
    path = _typed_tar(tmp_path / "late.tar", members)
    index = index_dataset(str(path), progress=False)
    assert index.schema.names == ["__key__", "seg", "txt"]
    assert get_format("webdataset").read_schema(str(path)) == index.schema
    rows = list(StreamingDataset(index, shuffle=False, rank=0, world_size=1))
    assert [r["__key__"] for r in rows if r["seg"] is not None] == ["0350"] and rows[350][
        "seg"
    ] == b"350"
