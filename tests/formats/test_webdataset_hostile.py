"""Hostile and odd WebDataset shards are refused while indexing (naming file and member)
or, under on_error="skip", left out of the counts so they equal what reading yields."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from shardwise.cli import main
from shardwise.errors import FormatError, UnsafeMemberError
from shardwise.index import open_dataset
from shardwise.loader import StreamingDataset


def _tar(path: Path, members: list[tuple[str, bytes, bytes]]) -> Path:
    """members: (name, data, type) with type tarfile.REGTYPE, SYMTYPE, LNKTYPE, CHRTYPE, FIFOTYPE."""
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
    return [m for i in range(start, start + n) for m in ((f"s{i:03d}.txt", b"t%d" % i, tarfile.REGTYPE),
                                                        (f"s{i:03d}.cls", b"%d" % (i % 3), tarfile.REGTYPE))]


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
        kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    name, typ = BAD[kind]
    path = _tar(tmp_path / "a.tar", _good(5) + [(name, b"x", typ)] + _good(4, 5))
    with pytest.raises(UnsafeMemberError) as info:
        open_dataset(str(path), progress=False)
    assert "a.tar" in str(info.value) and name.lstrip("/") in str(info.value)
    assert main(["inspect", str(path)]) == 1
    assert name.lstrip("/") in capsys.readouterr().err
    index = open_dataset(str(path), progress=False, on_error="skip")
    assert index.num_samples == 9
    ds = StreamingDataset(str(path), batch_size=1, shuffle=False, on_error="skip", rank=0, world_size=1)
    assert [s["__key__"] for s in ds] == [f"s{i:03d}" for i in range(9)]
    assert ds.quarantine.count == 1


def test_a_key_whose_members_are_not_adjacent_is_named(tmp_path: Path) -> None:
    members = _good(2) + [("s000.json", b"{}", tarfile.REGTYPE)] + _good(2, 2)
    path = _tar(tmp_path / "b.tar", members)
    with pytest.raises(FormatError, match="'s000' has members that are not adjacent") as info:
        open_dataset(str(path), progress=False)
    assert "s000.json" in str(info.value)
    assert open_dataset(str(path), progress=False, on_error="skip", refresh=True).num_samples == 4


def test_a_wrong_explicit_format_is_an_error_and_keeps_the_saved_index(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"id": list(range(50))}), tmp_path / "a.parquet", row_group_size=10)
    assert main(["inspect", str(tmp_path)]) == 0
    saved = (tmp_path / "_shardwise_index.json").read_bytes()
    capsys.readouterr()
    assert main(["inspect", str(tmp_path), "--format", "jsonl"]) == 1
    err = capsys.readouterr().err
    assert "a.parquet" in err and "parquet file" in err
    assert (tmp_path / "_shardwise_index.json").read_bytes() == saved


@pytest.mark.parametrize("suffix", [".tar.gz", ".tgz"])
def test_gzip_compressed_shards_stream_whole(tmp_path: Path, suffix: str) -> None:
    import gzip

    for f in range(3):
        raw = _tar(tmp_path / "raw.tar", _good(20, 20 * f)).read_bytes()
        (tmp_path / f"shard-{f}{suffix}").write_bytes(gzip.compress(raw))
    (tmp_path / "raw.tar").unlink()
    index = open_dataset(str(tmp_path), progress=False)
    assert index.format == "webdataset" and index.num_units == 3 and index.num_samples == 60
    ds = StreamingDataset(str(tmp_path), batch_size=4, seed=2, rank=0, world_size=1)
    got = [(s["__key__"], s["txt"]) for s in ds]
    assert sorted(got) == [(f"s{i:03d}", b"t%d" % i) for i in range(60)]
    (tmp_path / f"shard-1{suffix}").write_bytes((tmp_path / f"shard-1{suffix}").read_bytes()[:-40])
    with pytest.raises(FormatError, match=f"shard-1{suffix}"):
        open_dataset(str(tmp_path), progress=False, refresh=True)
