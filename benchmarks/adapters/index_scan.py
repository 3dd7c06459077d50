"""Indexing many small Parquet files on S3: shardwise's index_dataset (cold, warm), a
sequential footer loop, and the limit (concurrent ranged reads of each file's last 64 KiB).

Every function runs in a fresh worker process and times only its own work (imports and
client set-up excluded); ``s3`` holds the endpoint to use (the latency proxy), the
credentials and the bucket. ``cpu_s`` is the worker's CPU time over the timed part.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

TAIL = 64 * 1024
CONNECTIONS = 64


def _options(s3: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": s3["key"],
        "secret": s3["secret"],
        "client_kwargs": {"endpoint_url": s3["proxy"]},
    }


def _open(s3: dict[str, Any], prefix: str) -> dict[str, Any]:
    from shardwise.index import index_dataset

    url = f"s3://{s3['bucket']}/{prefix}"
    c0, t0 = time.process_time(), time.perf_counter()
    index = index_dataset(url, storage_options=_options(s3), progress=True)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "seconds": seconds,
        "cpu_s": cpu,
        "files": len(index.files),
        "samples": index.num_samples,
        "reused_files": index.reused_files,
        "location": index.location,
    }


def cold(s3: dict[str, Any], prefix: str, **_: Any) -> dict[str, Any]:
    """index_dataset with no saved index (the driver removed it): list, read every footer."""
    return _open(s3, prefix)


def warm(s3: dict[str, Any], prefix: str, **_: Any) -> dict[str, Any]:
    """index_dataset again: the saved index is reused, no file changed."""
    return _open(s3, prefix)


def _client(s3: dict[str, Any], connections: int) -> Any:
    from aiobotocore.session import get_session
    from botocore.config import Config

    return get_session().create_client(
        "s3",
        endpoint_url=s3["proxy"],
        aws_access_key_id=s3["key"],
        aws_secret_access_key=s3["secret"],
        region_name="us-east-1",
        config=Config(max_pool_connections=connections),
    )


async def _list(client: Any, bucket: str, prefix: str) -> list[str]:
    keys: list[str] = []
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/")
    async for page in pages:
        keys.extend(o["Key"] for o in page.get("Contents", []))
    return keys


async def _tail(client: Any, bucket: str, key: str) -> bytes:
    resp = await client.get_object(Bucket=bucket, Key=key, Range=f"bytes=-{TAIL}")
    async with resp["Body"] as body:
        return bytes(await body.read())


async def _limit(s3: dict[str, Any], keys: list[str], prefix: str) -> dict[str, Any]:
    async with _client(s3, CONNECTIONS) as client:
        await _tail(client, s3["bucket"], keys[0])  # the client's set-up, not timed
        c0, t0 = time.process_time(), time.perf_counter()
        listed = await _list(client, s3["bucket"], prefix)
        t1 = time.perf_counter()
        todo = iter(keys)

        async def worker() -> int:
            got = 0
            for key in todo:
                got += len(await _tail(client, s3["bucket"], key))
            return got

        total = sum(await asyncio.gather(*(worker() for _ in range(CONNECTIONS))))
        t2 = time.perf_counter()
    return {
        "seconds": t2 - t1,
        "list_s": t1 - t0,
        "with_list_s": t2 - t0,
        "cpu_s": time.process_time() - c0,
        "files": len(keys),
        "listed": len(listed),
        "bytes": total,
    }


def limit(s3: dict[str, Any], prefix: str, keys_file: str, **_: Any) -> dict[str, Any]:
    """The limit: each file's last 64 KiB by one ranged GET, 64 connections (aiobotocore),
    keys known; the listing of the prefix is timed apart (``list_s``)."""
    with open(keys_file) as f:
        keys = json.load(f)
    return asyncio.run(_limit(s3, keys, prefix))


async def _sequential(s3: dict[str, Any], keys: list[str]) -> dict[str, Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    async with _client(s3, 1) as client:
        await _tail(client, s3["bucket"], keys[0])
        c0, t0 = time.process_time(), time.perf_counter()
        rows = 0
        for key in keys:
            tail = await _tail(client, s3["bucket"], key)
            rows += pq.ParquetFile(pa.BufferReader(tail)).metadata.num_rows
        seconds = time.perf_counter() - t0
    return {
        "sample_s": seconds,
        "cpu_s": time.process_time() - c0,
        "sample": len(keys),
        "rows": rows,
    }


def sequential(
    s3: dict[str, Any], keys_file: str, files: int, sample: int, **_: Any
) -> dict[str, Any]:
    """A loop reading one footer after another (one ranged GET each, the files being small
    enough), timed over the first ``sample`` files and scaled to ``files``."""
    with open(keys_file) as f:
        keys = json.load(f)[:sample]
    out = asyncio.run(_sequential(s3, keys))
    out["seconds"] = out["sample_s"] * files / len(keys)
    out["files"] = files
    return out
