"""prepare: parallel downloads from a real HTTP server on 127.0.0.1 with resume and
verification, conversion to indexed Parquet shards, steps and backend rules."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from _httpserver import http_files

from shardwise import ConfigError, StorageError, UnsupportedError
from shardwise.cli import main
from shardwise.preparing import prepare


@pytest.fixture
def http_root(tmp_path: Path) -> Iterator[tuple[str, Path, list[tuple[str, int]]]]:
    root = tmp_path / "www"
    root.mkdir()
    with http_files(root) as served:
        yield served.base, root, served.gets


def _jsonl(path: Path, start: int, n: int) -> None:
    with open(path, "w") as f:
        for i in range(start, start + n):
            f.write(json.dumps({"id": i, "text": "w" * (i % 300)}) + "\n")


def test_download_resume_convert_index(
    http_root: tuple[str, Path, list[tuple[str, int]]], tmp_path: Path
) -> None:
    base, root, served = http_root
    for k in range(3):
        _jsonl(root / f"f{k}.jsonl", k * 4000, 4000)
    urls = [f"{base}/f{k}.jsonl" for k in range(3)]
    out = tmp_path / "out"
    # a partial download left by an interrupted run: the first 100,000 bytes of f1
    (out / "raw").mkdir(parents=True)
    full = (root / "f1.jsonl").read_bytes()
    (out / "raw" / "f1.jsonl.part").write_bytes(full[:100_000])
    sha = hashlib.sha256(full).hexdigest()
    result = prepare(
        urls,
        str(out),
        target_shard_bytes=64 * 1024,
        checksums={urls[1]: f"sha256:{sha}"},
        progress=False,
    )
    assert result.resumed_bytes == 100_000
    ranged_f1 = [s for p, s in served if p == "/f1.jsonl" and s >= 0]
    assert ranged_f1 and min(ranged_f1) == 100_000  # only the rest was fetched
    assert (out / "raw" / "f1.jsonl").read_bytes() == full
    assert not list((out / "raw").glob("*.part"))
    assert result.num_rows == 12_000
    assert len(result.shards) > 3
    ids = sorted(
        i for s in result.shards for i in pq.read_table(s, columns=["id"]).column("id").to_pylist()
    )
    assert ids == list(range(12_000))
    assert os.path.exists(result.index_location)
    # a rerun downloads nothing and rewrites nothing
    before = len(served)
    again = prepare(urls, str(out), progress=False)
    assert again.shards == result.shards and again.num_rows == 12_000
    assert not [s for _, s in served[before:] if s >= 0]  # no data transfer, only size checks


def test_bad_checksum_is_an_error_and_not_kept(
    http_root: tuple[str, Path, list[tuple[str, int]]], tmp_path: Path
) -> None:
    base, root, _ = http_root
    _jsonl(root / "a.jsonl", 0, 10)
    with pytest.raises(StorageError, match="checksum mismatch"):
        prepare(
            [f"{base}/a.jsonl"],
            str(tmp_path / "o"),
            checksums={f"{base}/a.jsonl": "sha256:" + "0" * 64},
            progress=False,
        )
    assert not (tmp_path / "o" / "raw" / "a.jsonl").exists()
    assert not (tmp_path / "o" / "raw" / "a.jsonl.part").exists()


def test_a_checksum_for_no_downloaded_file_is_refused_not_ignored(
    http_root: tuple[str, Path, list[tuple[str, int]]], tmp_path: Path
) -> None:
    """A key that names a local path, or a typo of a URL, would verify nothing."""
    base, root, _ = http_root
    _jsonl(root / "a.jsonl", 0, 10)
    local = tmp_path / "b.jsonl"
    _jsonl(local, 0, 10)
    for key in (str(local), f"{base}/a.jsonl.typo"):
        with pytest.raises(ConfigError, match="not among the files to download"):
            prepare(
                [f"{base}/a.jsonl", str(local)],
                str(tmp_path / "o"),
                checksums={key: "sha256:" + "0" * 64},
                progress=False,
            )
    assert not (tmp_path / "o" / "data").exists()


def test_steps_subset_and_backend_rules(tmp_path: Path) -> None:
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "x.jsonl", 0, 500)
    with pytest.raises(UnsupportedError, match="download.*cannot run on backend 'ray'.*thread"):
        prepare([str(src)], str(tmp_path / "o"), steps=["download"], backend="ray")
    r = prepare(
        [str(src)], str(tmp_path / "o"), steps=["convert"], backend="sequential", progress=False
    )
    assert len(r.shards) == 1 and r.index_location == ""
    r2 = prepare([str(src)], str(tmp_path / "o"), steps=["index"], backend="thread", progress=False)
    assert r2.num_rows == 500


def test_prepare_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in"
    src.mkdir()
    _jsonl(src / "x.jsonl", 0, 300)
    assert main(["prepare", str(src), "--out", str(tmp_path / "o"), "--shard-mb", "0.01"]) == 0
    assert "300 rows" in capsys.readouterr().out
    assert main(["prepare", str(src), "--out", str(tmp_path / "o"), "--steps", "bogus"]) == 1
    assert "unknown steps" in capsys.readouterr().err


def test_a_source_that_always_cuts_its_body_short_is_a_storage_error_naming_it(
    tmp_path: Path,
) -> None:
    """Content-Length: 2000000 and 1,000 bytes written, on every try: after the retries, a
    StorageError naming the URL (it was aiohttp's raw ClientPayloadError)."""
    root = tmp_path / "www"
    root.mkdir()
    (root / "big.jsonl").write_bytes(b"x" * 2_000_000)
    with http_files(root) as served:
        served.cut_short.add("/big.jsonl")
        url = f"{served.base}/big.jsonl"
        with pytest.raises(StorageError, match=url) as err:
            prepare([url], str(tmp_path / "o"), progress=False, backend="thread")
    assert "ClientPayloadError" in str(err.value) or "Payload" in str(err.value), err.value


def test_mixed_formats_are_refused_before_anything_is_downloaded(
    http_root: tuple[str, Path, list[tuple[str, int]]], tmp_path: Path
) -> None:
    base, root, served = http_root
    _jsonl(root / "a.jsonl", 0, 100)
    (root / "b.parquet").write_bytes(b"PAR1" + bytes(10_000) + b"PAR1")
    with pytest.raises(ConfigError, match="mix formats.*jsonl.*parquet"):
        prepare([f"{base}/a.jsonl", f"{base}/b.parquet"], str(tmp_path / "o"), progress=False)
    assert not [g for g in served if g[0] in ("/a.jsonl", "/b.parquet")]  # nothing fetched
    assert not (tmp_path / "o" / "raw").exists() or not any((tmp_path / "o" / "raw").iterdir())
