"""Damaged and hostile files, property-based: every reader gives the exact rows or a
ShardwiseError naming the file, never a raw exception, a hang or a crash."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError, ShardwiseError
from shardwise.index import open_dataset
from shardwise.loader import StreamingDataset

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _jsonl_bytes(n: int) -> bytes:
    return "".join(json.dumps({"id": i, "text": f"row {i}", "tags": [i, i + 1]}) + "\n" for i in range(n)).encode()


def _parquet_bytes(n: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(pa.table({"id": list(range(n)), "text": [f"row {i}" for i in range(n)]}), buf, row_group_size=25)
    return buf.getvalue()


def _tar_bytes(n: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            data = f"row {i}".encode()
            info = tarfile.TarInfo(f"s{i:04d}.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


ORIGINALS = {"a.jsonl": _jsonl_bytes(60), "a.jsonl.gz": gzip.compress(_jsonl_bytes(60), mtime=0),
             "a.parquet": _parquet_bytes(60), "a.tar": _tar_bytes(60),
             "a.tar.gz": gzip.compress(_tar_bytes(60), mtime=0)}


def _read_all(path: Path, on_error: str) -> int:
    index = open_dataset(str(path), progress=False, refresh=True, on_error=on_error, cache_dir=str(path.parent / "c"))
    ds = StreamingDataset(index, batch_size=1, shuffle=False, rank=0, world_size=1, on_error=on_error)
    return sum(1 for _ in ds)


def _check(path: Path, damaged: bytes, original: bytes) -> None:
    path.write_bytes(damaged)
    for on_error in ("raise", "skip"):
        try:
            rows = _read_all(path, on_error)
        except PlanError as exc:  # nothing readable left: an empty dataset has no plan
            assert "no samples" in str(exc) and path.name in str(exc), exc
            continue
        except ShardwiseError as exc:
            assert path.name in str(exc), exc
            continue
        if damaged == original:
            assert rows == 60
        else:
            assert 0 <= rows <= 60 + damaged.count(b"\n")


@pytest.mark.parametrize("name", sorted(ORIGINALS))
@FUZZ
@given(data=st.data())
def test_truncation_at_any_offset(name: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    original = ORIGINALS[name]
    cut = data.draw(st.integers(0, len(original) - 1))
    _check(tmp_path_factory.mktemp("t") / name, original[:cut], original)


@pytest.mark.parametrize("name", sorted(ORIGINALS))
@FUZZ
@given(data=st.data())
def test_random_byte_flips(name: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    damaged = bytearray(ORIGINALS[name])
    for _ in range(data.draw(st.integers(1, 8))):
        at = data.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= data.draw(st.integers(1, 255))
    _check(tmp_path_factory.mktemp("f") / name, bytes(damaged), ORIGINALS[name])


@FUZZ
@given(lines=st.lists(st.binary(max_size=80), max_size=20))
def test_random_jsonl_bytes(lines: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> None:
    _check(tmp_path_factory.mktemp("j") / "r.jsonl", b"\n".join(lines), b"")


@FUZZ
@given(names=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=8),
       kinds=st.lists(st.sampled_from([tarfile.REGTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE,
                                       tarfile.FIFOTYPE, tarfile.CHRTYPE]), min_size=8, max_size=8))
def test_random_tar_member_names_and_types(names: list[str], kinds: list[bytes],
                                           tmp_path_factory: pytest.TempPathFactory) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tf:
        for name, kind in zip(names, kinds):
            info = tarfile.TarInfo(name)
            info.type = kind
            if kind == tarfile.REGTYPE:
                info.size = 3
                tf.addfile(info, io.BytesIO(b"abc"))
            else:
                info.linkname = "x"
                tf.addfile(info)
    _check(tmp_path_factory.mktemp("n") / "r.tar", buf.getvalue(), b"")
