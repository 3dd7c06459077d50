"""Downloads on Ray, Spark and Dask workers straight into a bucket (SeaweedFS), from a
real HTTP server on 127.0.0.1: verified sizes and checksums, an interrupted download
resumed from its last whole part, a corrupt one refused naming the URL, and conversion and
indexing of what landed in the bucket."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from _engines import make_backend
from _httpserver import Served, http_files

from shardwise import StorageError
from shardwise.parallel import parallel_backend
from shardwise.preparing import prepare

pytestmark = pytest.mark.engine

PART = 64 * 1024


def _jsonl(path: Path, start: int, n: int) -> bytes:
    lines = [json.dumps({"id": i, "text": "w" * (i % 200)}) for i in range(start, start + n)]
    path.write_text("\n".join(lines) + "\n")
    return path.read_bytes()


def _sources(root: Path, files: int = 3, rows: int = 2500) -> dict[str, bytes]:
    return {f"f{k}.jsonl": _jsonl(root / f"f{k}.jsonl", k * rows, rows) for k in range(files)}


def _leftovers(fs: Any, prefix: str) -> list[str]:
    """Temporary keys and partial downloads still in the bucket."""
    return [p for p in fs.find(prefix) if "/_partial/" in p or "/_tmp." in p or "/_work/" in p]


@pytest.mark.parametrize("engine", ["ray", "spark", "dask"])
def test_downloads_run_on_the_workers_and_land_verified_in_the_bucket(
    engine: str,
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
) -> None:
    name, fs = bucket
    opts = s3_server["storage_options"]
    (tmp_path / "www").mkdir()
    files = _sources(tmp_path / "www")
    backend = make_backend(engine, request)
    out = f"s3://{name}/prep"
    with http_files(tmp_path / "www") as served:
        urls = [f"{served.base}/{n}" for n in files]
        sums = {u: "sha256:" + hashlib.sha256(files[n]).hexdigest() for u, n in zip(urls, files)}
        try:
            with parallel_backend(backend, steps=["download", "prepare"]):
                result = prepare(
                    urls,
                    out,
                    storage_options=opts,
                    checksums=sums,
                    part_bytes=PART,
                    target_shard_bytes=64 * 1024,
                    progress=False,
                )
        finally:
            backend.close()
    for n, data in files.items():
        assert fs.cat_file(f"{name}/prep/raw/{n}") == data
    assert result.downloaded == [f"{out}/raw/{n}" for n in files]
    assert _leftovers(fs, f"{name}/prep") == []
    # every byte was fetched by a worker process, none by the driver (no driver disk in the path)
    assert served.pids and os.getpid() not in served.pids and -1 not in served.pids
    assert (
        result.num_rows == 7500
        and result.shards
        and all(s.startswith(f"{out}/data/") for s in result.shards)
    )
    ids = sorted(
        i
        for s in result.shards
        for i in pq.read_table(s.removeprefix("s3://"), filesystem=fs, columns=["id"])[
            "id"
        ].to_pylist()
    )
    assert ids == list(range(7500))


def _run(
    served: Served,
    files: dict[str, bytes],
    out: str,
    opts: dict[str, Any],
    backend: Any,
    checksums: dict[str, str] | None = None,
) -> Any:
    urls = [f"{served.base}/{n}" for n in files]
    return prepare(
        urls,
        out,
        steps=["download"],
        backend=backend,
        storage_options=opts,
        part_bytes=PART,
        checksums=checksums,
        progress=False,
    )


def test_an_interrupted_download_resumes_from_its_last_whole_part(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
) -> None:
    name, fs = bucket
    opts = s3_server["storage_options"]
    (tmp_path / "www").mkdir()
    files = _sources(tmp_path / "www", files=2, rows=6000)
    out = f"s3://{name}/prep"
    backend = make_backend("dask", request)
    try:
        with http_files(tmp_path / "www") as served:
            served.gone_from["/f1.jsonl"] = 300_000  # the source vanishes in the middle of f1
            with pytest.raises(StorageError, match=f"{served.base}/f1.jsonl"):
                _run(served, files, out, opts, backend)
            assert not fs.exists(f"{name}/prep/raw/f1.jsonl")  # nothing incomplete is published
            assert fs.find(
                f"{name}/prep/raw/_partial/f1.jsonl"
            )  # whole parts of f1 stay for the rerun
            served.gone_from.clear()
            before = len(served.gets)
            result = _run(served, files, out, opts, backend)
            again = [s for p, s in served.gets[before:] if p == "/f1.jsonl" and s >= 0]
    finally:
        backend.close()
    assert result.resumed_bytes > 0 and result.resumed_bytes % PART == 0
    assert min(again) == result.resumed_bytes  # only the rest was fetched
    for n, data in files.items():
        assert fs.cat_file(f"{name}/prep/raw/{n}") == data
    assert _leftovers(fs, f"{name}/prep") == []


def test_a_wrong_checksum_fails_naming_the_url_and_publishes_nothing(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    s3_server: dict[str, Any],
    bucket: tuple[str, Any],
) -> None:
    name, fs = bucket
    opts = s3_server["storage_options"]
    (tmp_path / "www").mkdir()
    files = _sources(tmp_path / "www", files=1, rows=3000)
    out = f"s3://{name}/prep"
    backend = make_backend("spark", request)
    try:
        with http_files(tmp_path / "www") as served:
            url = f"{served.base}/f0.jsonl"
            with pytest.raises(StorageError, match=f"checksum mismatch for {url}"):
                _run(served, files, out, opts, backend, {url: "sha256:" + "0" * 64})
            # no final key, no temporary key, no part to resume
            assert (
                not fs.exists(f"{name}/prep/raw/f0.jsonl") and _leftovers(fs, f"{name}/prep") == []
            )
            result = _run(
                served,
                files,
                out,
                opts,
                backend,
                {url: "md5:" + hashlib.md5(files["f0.jsonl"]).hexdigest()},
            )
    finally:
        backend.close()
    assert result.resumed_bytes == 0
    assert fs.cat_file(f"{name}/prep/raw/f0.jsonl") == files["f0.jsonl"]
