"""Writers, pipelines and prepare refuse a bad bucket, bad credentials and a missing
source at once, naming the URL (SeaweedFS; the readers' refusals are in test_storage.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from _httpserver import http_files

from shardwise import StorageError
from shardwise.formats import get_format
from shardwise.pipeline import read_jsonl
from shardwise.preparing import prepare
from shardwise.storage import is_transient

pytestmark = pytest.mark.engine


@pytest.fixture
def no_aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import s3fs

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(var, raising=False)
    for var in ("AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.setenv(var, "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    s3fs.S3FileSystem.clear_instance_cache()
    yield
    s3fs.S3FileSystem.clear_instance_cache()


def _cases(server: dict[str, Any], name: str) -> list[tuple[str, dict[str, Any], str]]:
    good = server["storage_options"]
    return [
        (f"s3://nobucket-{name}/out", good, "no such bucket"),
        (f"s3://{name}/out", {**good, "secret": "wrong"}, "access denied to"),
        (
            f"s3://{name}/out",
            {"client_kwargs": {"endpoint_url": server["endpoint_url"]}},
            "no credentials for",
        ),
    ]


def _check(info: pytest.ExceptionInfo[StorageError], url: str, words: str) -> None:
    text = str(info.value)
    assert words in text and url in text, text
    assert not is_transient(info.value.__cause__ or info.value)


def test_shard_writer_refusals_name_the_url(
    s3_server: dict[str, Any], bucket: tuple[str, Any], no_aws_env: None
) -> None:
    name, _ = bucket
    batch = pa.record_batch({"id": pa.array(range(10))})
    # (a missing bucket: SeaweedFS creates it on a PUT, AWS refuses the PUT; the pipeline and
    # prepare check the bucket before they start, below)
    for url, opts, words in _cases(s3_server, name)[1:]:
        writer = get_format("parquet", storage_options=opts).open_writer(
            f"{url}/part", target_shard_bytes=1 << 20
        )
        with pytest.raises(StorageError) as info:
            writer.write(batch)
            writer.close()
        _check(info, url, words)


def test_pipeline_and_prepare_refusals_name_the_url(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path, no_aws_env: None
) -> None:
    name, _ = bucket
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"id": i}) + "\n" for i in range(20)))
    for url, opts, words in _cases(s3_server, name):
        with pytest.raises(StorageError) as info:
            read_jsonl(str(src)).write_parquet(url, storage_options=opts).run(
                "sequential", progress=False
            )
        _check(info, url, words)
        with pytest.raises(StorageError) as info:
            prepare([str(src)], url, storage_options=opts, progress=False)
        _check(info, url, words)


def test_prepare_of_a_missing_source_names_it(
    s3_server: dict[str, Any], bucket: tuple[str, Any], tmp_path: Path
) -> None:
    name, _ = bucket
    with http_files(tmp_path) as served:
        url = f"{served.base}/missing.jsonl"
        with pytest.raises(StorageError, match=f"file not found: {url}"):
            prepare(
                [url],
                f"s3://{name}/out",
                storage_options=s3_server["storage_options"],
                backend="thread",
                progress=False,
            )
    with pytest.raises(StorageError, match=f"no such file or directory: s3://{name}/nothing.jsonl"):
        prepare(
            [f"s3://{name}/nothing.jsonl"],
            f"s3://{name}/out",
            storage_options=s3_server["storage_options"],
            progress=False,
        )
