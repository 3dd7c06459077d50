"""Damaged and hostile files, property-based: every reader gives the exact rows or a
ShardwiseError naming the file, never a raw exception, a hang, a crash or a silent drop.

Each example indexes a file and streams it whole under both error policies. Whatever
happens, the index's counts equal what reading yields (the loader plans from them).
Where the result can be known from the damage (a cut JSONL file, a cut tar, records
built line by line), the test asserts exactly those rows; a damaged tar must give the
same result compressed (``.tar.gz``) as plain.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardwise.errors import PlanError, ShardwiseError
from shardwise.index import index_dataset
from shardwise.loader import StreamingDataset

FUZZ = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
N = 60


@pytest.fixture(autouse=True, scope="module")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:  # counts cached by the loader stay out of ~/.cache
        mp.setenv("SHARDWISE_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


def _jsonl_bytes(n: int) -> bytes:
    return "".join(
        json.dumps({"id": i, "text": f"row {i}", "tags": [i, i + 1]}) + "\n" for i in range(n)
    ).encode()


def _parquet_bytes(n: int) -> bytes:
    buf = io.BytesIO()
    pq.write_table(
        pa.table({"id": list(range(n)), "text": [f"row {i}" for i in range(n)]}),
        buf,
        row_group_size=25,
    )
    return buf.getvalue()


def _tar_bytes(n: int) -> bytes:
    """``n`` one-member samples: each a 512-byte header and one 512-byte data block."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tf:
        for i in range(n):
            data = f"row {i}".encode()
            info = tarfile.TarInfo(f"s{i:04d}.txt")
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


ORIGINALS = {
    "a.jsonl": _jsonl_bytes(N),
    "a.jsonl.gz": gzip.compress(_jsonl_bytes(N), mtime=0),
    "a.jsonl.zst": pa.compress(_jsonl_bytes(N), "zstd", asbytes=True),
    "a.parquet": _parquet_bytes(N),
    "a.tar": _tar_bytes(N),
    "a.tar.gz": gzip.compress(_tar_bytes(N), mtime=0),
}
ALL_ROWS = [str(i) for i in range(N)]  # ids, or tar keys without their "s" and zeros


@dataclass(frozen=True)
class Read:
    """What streaming a file gave: the rows' ids (or keys) in order and what was quarantined."""

    rows: list[str]
    quarantined: int


def _ident(row: dict[str, Any]) -> str:
    return str(row["id"]) if "id" in row else str(row["__key__"]).lstrip("s").lstrip("0") or "0"


def _read(path: Path, on_error: str) -> Read | None:
    """Index and stream ``path`` whole: the rows, or None for a ShardwiseError naming it.

    Whatever the damage, the index counts exactly what reading yields: all of it under
    "raise"; under "skip" the rows kept plus the bad records (WebDataset indexing already
    leaves bad samples out)."""
    try:
        index = index_dataset(str(path), progress=False, refresh=True, on_error=on_error)
        ds = StreamingDataset(
            index, batch_size=1, shuffle=False, rank=0, world_size=1, on_error=on_error
        )
        rows = [_ident(r) for r in ds]
    except PlanError as exc:  # nothing readable left: an empty dataset has no plan
        assert "no samples" in str(exc) and path.name in str(exc), exc
        return None
    except ShardwiseError as exc:
        assert path.name in str(exc), exc
        return None
    left_out = ds.quarantine.count if index.format != "webdataset" else 0
    assert len(rows) + left_out == index.num_samples, (
        len(rows),
        ds.quarantine.count,
        index.num_samples,
    )
    if on_error == "raise":
        assert ds.quarantine.count == 0
    return Read(rows, ds.quarantine.count)


def _both(path: Path, data: bytes) -> tuple[Read | None, Read | None]:
    path.write_bytes(data)
    return _read(path, "raise"), _read(path, "skip")


def _json_rows(data: bytes) -> tuple[list[str], int]:
    """The ids of the lines of ``data`` that are JSON objects, and how many other records."""
    good, bad = [], 0
    for line in data.split(b"\n"):
        if not line.strip(b" \t\r"):
            continue
        try:
            good.append(str(json.loads(line).get("id")))  # a flipped key leaves a record without id
        except (ValueError, AttributeError):
            bad += 1
    return good, bad


# ---------------------------------------------------------------- truncation


@pytest.mark.parametrize("name", sorted(ORIGINALS))
@FUZZ
@given(data=st.data())
def test_truncation_at_any_offset(
    name: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    original = ORIGINALS[name]
    cut = data.draw(st.integers(0, len(original) - 1))
    raised, skipped = _both(tmp_path_factory.mktemp("t") / name, original[:cut])
    if name == "a.jsonl":  # the complete lines, and the cut one only if it still parses
        good, bad = _json_rows(original[:cut])
        assert skipped == (Read(good, bad) if good else None)
        assert raised == (None if bad or not good else Read(good, 0))
    elif name == "a.tar":  # whole only if the members and one end-of-archive block survive;
        # under "skip" the samples before the one in progress at the cut are kept
        whole = cut >= N * 1024 + 512
        assert raised == (Read(ALL_ROWS, 0) if whole else None)
        headers = min(N, (cut + 512) // 1024)  # members whose header survives whole
        kept = Read(ALL_ROWS[: headers - 1], 1) if headers > 1 else None
        assert skipped == (Read(ALL_ROWS, 0) if whole else kept)
    else:  # a cut gzip or zstd stream, or Parquet footer: nothing is trusted
        assert raised is None and skipped is None


# ---------------------------------------------------------------- byte flips


def _flip(data: bytes, draw: st.DataObject) -> bytes:
    damaged = bytearray(data)
    for _ in range(draw.draw(st.integers(1, 8))):
        at = draw.draw(st.integers(0, len(damaged) - 1))
        damaged[at] ^= draw.draw(st.integers(1, 255))
    return bytes(damaged)


@pytest.mark.parametrize("name", sorted(ORIGINALS))
@FUZZ
@given(data=st.data())
def test_random_byte_flips(
    name: str, data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    damaged = _flip(ORIGINALS[name], data)
    raised, skipped = _both(tmp_path_factory.mktemp("f") / name, damaged)
    if raised is not None:  # a file read without complaint kept every record
        assert len(raised.rows) == (len(_json_rows(damaged)[0]) if name == "a.jsonl" else N)
    if name == "a.jsonl" and skipped is not None:
        assert len(skipped.rows) == len(_json_rows(damaged)[0]) or skipped.quarantined
    if name.endswith(
        ".gz"
    ):  # gzip's CRC catches every flip of the data (not of header flags or mtime)
        assert raised in (None, Read(ALL_ROWS, 0)) and skipped in (None, Read(ALL_ROWS, 0))
    if name == "a.tar.gz":
        return
    if name == "a.tar":  # the same damage inside a compressed shard reads the same, except that
        # a damaged compressed shard is not partly kept under "skip" (nothing before its CRC is
        # trusted)
        raised_gz, skipped_gz = _both(
            tmp_path_factory.mktemp("g") / "a.tar.gz", gzip.compress(damaged, mtime=0)
        )
        assert raised_gz == raised
        assert skipped_gz == skipped or (skipped_gz is None and raised is None)


# ---------------------------------------------------------------- tar headers


_FIELDS = {
    "name": (0, 100),
    "mode": (100, 8),
    "uid": (108, 8),
    "size": (124, 12),
    "mtime": (136, 12),
    "typeflag": (156, 1),
    "linkname": (157, 100),
    "magic": (257, 8),
    "uname": (265, 32),
    "prefix": (345, 155),
}


def _damage_header(data: bytes, member: int, field: str, value: bytes, fix_checksum: bool) -> bytes:
    """Overwrite one field of a member's header, then (usually) make its checksum match
    again, so tarfile reads the damaged header instead of stopping at it."""
    out = bytearray(data)
    head = member * 1024
    start, length = _FIELDS[field]
    value = value[:length]
    out[head + start : head + start + len(value)] = value
    if fix_checksum:
        out[head + 148 : head + 156] = b" " * 8
        out[head + 148 : head + 156] = b"%06o\0 " % sum(out[head : head + 512])
    return bytes(out)


@FUZZ
@given(
    member=st.integers(0, N - 1),
    field=st.sampled_from(sorted(_FIELDS)),
    value=st.binary(min_size=1, max_size=100),
    fix_checksum=st.booleans() | st.just(True),
)
def test_random_tar_headers(
    member: int,
    field: str,
    value: bytes,
    fix_checksum: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    damaged = _damage_header(ORIGINALS["a.tar"], member, field, value, fix_checksum)
    root = tmp_path_factory.mktemp("h")
    raised, skipped = _both(root / "a.tar", damaged)
    raised_gz, skipped_gz = _both(root / "a.tar.gz", gzip.compress(damaged, mtime=0))
    assert raised_gz == raised  # a damaged compressed shard is not partly kept under "skip"
    assert skipped_gz == skipped or (skipped_gz is None and raised is None)
    if raised is not None:
        assert skipped is not None and skipped.quarantined == 0 and skipped.rows == raised.rows
    header = damaged[member * 1024 : member * 1024 + 512]
    stored = (
        int(header[148:156].split(b"\0")[0].strip() or b"0", 8)
        if header[148:156].strip(b" \0").isdigit()
        else -1
    )
    if stored not in tarfile.calc_chksums(
        header
    ):  # tarfile stops at a bad checksum: never a shorter tar;
        # under "skip" the samples before the one in progress there are kept, and that one is bad
        assert raised is None
        assert skipped == (Read(ALL_ROWS[: member - 1], 1) if member > 1 else None)


@FUZZ
@given(
    names=st.lists(st.text(min_size=1, max_size=40), min_size=1, max_size=8),
    kinds=st.lists(
        st.sampled_from(
            [
                tarfile.REGTYPE,
                tarfile.SYMTYPE,
                tarfile.LNKTYPE,
                tarfile.DIRTYPE,
                tarfile.FIFOTYPE,
                tarfile.CHRTYPE,
            ]
        ),
        min_size=8,
        max_size=8,
    ),
)
def test_random_tar_member_names_and_types(
    names: list[str], kinds: list[bytes], tmp_path_factory: pytest.TempPathFactory
) -> None:
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
    root = tmp_path_factory.mktemp("n")
    plain = _both(root / "r.tar", buf.getvalue())
    assert _both(root / "r.tar.gz", gzip.compress(buf.getvalue(), mtime=0)) == plain
    raised, skipped = plain
    if raised is not None:  # read whole: every member was a regular file or a directory
        assert all(k in (tarfile.REGTYPE, tarfile.DIRTYPE) for k in kinds[: len(names)])
        assert skipped == raised


# ---------------------------------------------------------------- JSONL lines


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
_LINE = st.one_of(
    _JSON.map(lambda v: ("record", v)),
    st.binary(max_size=40).map(lambda b: ("bytes", b)),
    st.integers(65, 400).map(lambda d: ("deep", d)),
    st.sampled_from([b"", b"  ", b"\t\r"]).map(lambda b: ("blank", b)),
)


@FUZZ
@given(lines=st.lists(st.binary(max_size=80), max_size=20))
def test_random_jsonl_bytes(lines: list[bytes], tmp_path_factory: pytest.TempPathFactory) -> None:
    data = b"\n".join(lines)
    raised, skipped = _both(tmp_path_factory.mktemp("j") / "r.jsonl", data)
    good, bad = _json_rows(data)
    if raised is not None:
        assert bad == 0 and len(raised.rows) == len(good)
    if skipped is not None:
        assert len(skipped.rows) + skipped.quarantined == len(good) + bad


def _try_json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


@FUZZ
@given(lines=st.lists(_LINE, max_size=25))
def test_random_jsonl_records(
    lines: list[tuple[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Records of any JSON values (mixed types across rows), between garbage, blank and
    too-deep lines: exactly the records come back, in order, and the rest is counted."""
    text: list[bytes] = []
    ids: list[str] = []
    bad = 0
    for kind, value in lines:
        if kind == "record":
            ids.append(str(len(text)))
            text.append(json.dumps({"id": len(text), "v": value}).encode())
            continue
        if kind == "deep":
            raw = b'{"id": -1, "v": ' + b"[" * value + b"]" * value + b"}"
        else:
            raw = value.replace(b"\n", b" ")
            if isinstance(_try_json(raw), dict):
                raw = b"[]"  # garbage that happens to be an object: make it a non-object
        bad += bool(raw.strip(b" \t\r"))  # a blank line is no record at all
        text.append(raw)
    raised, skipped = _both(tmp_path_factory.mktemp("r") / "r.jsonl", b"\n".join(text) + b"\n")
    if not ids:
        assert raised is None and skipped is None
        return
    assert skipped == Read(ids, bad)
    assert raised == (Read(ids, 0) if bad == 0 else None)


# ---------------------------------------------------------------- Parquet page headers


def test_parquet_page_headers_against_arrow_under_a_memory_limit() -> None:
    """The page reader's differential fuzz (tests/support/_pagefuzz.py): page headers and
    chunks damaged field by field (types changed, fields given twice or dropped, lists
    lengthened, sizes lied about, bytes after a page, a second gzip member, a chunk past
    the end of the file), each compared with Arrow's ``read_row_group`` in a process
    whose address space is limited to 3 GiB: where Arrow raises the page reader declines,
    where Arrow reads it gives the same column or declines, and it never raises.
    ``SHARDWISE_FUZZ_CASES`` (default 400) and ``SHARDWISE_FUZZ_SEED`` choose the cases:
    the nightly run sets tens of thousands."""
    import os
    import subprocess
    import sys

    cases = int(os.environ.get("SHARDWISE_FUZZ_CASES", "400"))
    seed = int(os.environ.get("SHARDWISE_FUZZ_SEED", "0"))
    script = Path(__file__).parents[1] / "support" / "_pagefuzz.py"
    run = subprocess.run(
        [sys.executable, str(script), str(cases), str(seed), str(3 << 30)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout.strip().splitlines()[-1])
    assert summary["failed"] == 0, summary["failures"]
    assert summary["arrow read"] > 0 and summary["ours read"] > 0, summary
