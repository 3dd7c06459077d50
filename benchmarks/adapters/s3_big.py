"""The 2 GB S3 benchmark's systems in shardwise's interpreter: shardwise from S3 through its
node cache, shardwise from local disk, and the download limit.

Every function runs in a worker subprocess and gets ``data`` (the data set's directory,
its files under ``files/``), ``tmp`` (scratch), ``s3`` (endpoint, key, secret, metrics URL,
server pid, buckets), ``dataset`` (``tars`` or ``parquet``) and ``consumer``.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from adapters.s3_epochs import Server, epochs

__all__ = [
    "BATCH",
    "COLUMNS",
    "consumer_alone",
    "limit",
    "page_fill",
    "shardwise_local",
    "shardwise_s3",
    "unpack_shardwise",
]

BATCH = {"tars": 64, "parquet": 256}
# the tar reader puts ``__key__`` first whatever the projection, so it is asked for here
COLUMNS = {"tars": ["__key__", "jpg", "cls"], "parquet": ["id", "label", "emb"]}
WORKERS = 2
PREFETCH_FACTOR = 4
RANGE_BYTES = 16 * 2**20  # shardwise's ranged reads (loader/read/cached.py FETCH_CHUNK)


def unpack_shardwise(dataset: str) -> Callable[[Any], tuple[Any, int]]:
    """A numpy batch's payload (JPEG bytes, or the embeddings) and its rows."""
    if dataset == "tars":
        return lambda b: (b["jpg"], len(b["cls"]))
    return lambda b: (b["emb"], len(b["label"]))


def _loader(ds: Any) -> Callable[[int], Iterable[Any]]:
    from torch.utils.data import DataLoader

    def make(epoch: int) -> Iterable[Any]:
        ds.set_epoch(epoch)
        return DataLoader(ds, batch_size=None, num_workers=WORKERS, prefetch_factor=PREFETCH_FACTOR)

    return make


def _dataset(source: str, dataset: str, **kw: Any) -> Any:
    from shardwise import StreamingDataset

    return StreamingDataset(
        source,
        batch_size=BATCH[dataset],
        seed=0,
        columns=COLUMNS[dataset],
        batch_format="numpy",
        num_workers=WORKERS,
        progress=False,
        **kw,
    )


def storage_options(s3: dict[str, Any]) -> dict[str, Any]:
    """s3fs options for the benchmark's server."""
    return {
        "key": s3["key"],
        "secret": s3["secret"],
        "client_kwargs": {"endpoint_url": s3["endpoint"]},
    }


def shardwise_local(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """shardwise over the local files (page cache warmed by the driver): the reference."""
    t0 = time.perf_counter()
    ds = _dataset(str(Path(data) / "files"), dataset)
    setup = time.perf_counter() - t0
    res = epochs(_loader(ds), unpack_shardwise(dataset), consumer, Server(s3, "none"))
    return {"setup_s": setup, **res}


def shardwise_s3(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """shardwise from S3 with a fresh node cache: the cold epoch fills it, the warm reads it."""
    cache = os.path.join(tmp, "node-cache")
    bucket = s3["buckets"]["shardwise"][dataset]
    t0 = time.perf_counter()
    ds = _dataset(
        f"s3://{bucket}/",
        dataset,
        storage_options=storage_options(s3),
        cache_dir=cache,
        cache_bytes=16 * 2**30,
    )
    setup = time.perf_counter() - t0
    res = epochs(_loader(ds), unpack_shardwise(dataset), consumer, Server(s3, bucket))
    shutil.rmtree(cache, ignore_errors=True)
    return {"setup_s": setup, **res}


def _client(s3: dict[str, Any], connections: int) -> Any:
    import botocore.session
    from botocore.config import Config

    return botocore.session.get_session().create_client(
        "s3",
        endpoint_url=s3["endpoint"],
        aws_access_key_id=s3["key"],
        aws_secret_access_key=s3["secret"],
        region_name="us-east-1",
        config=Config(max_pool_connections=connections, retries={"max_attempts": 3}),
    )


def _ranges(client: Any, bucket: str) -> list[tuple[str, int, int]]:
    out: list[tuple[str, int, int]] = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket):
        for obj in page.get("Contents", []):
            if not obj["Key"].endswith((".tar", ".parquet")):
                continue  # the index shardwise keeps in the bucket
            size = int(obj["Size"])
            out += [
                (obj["Key"], lo, min(size, lo + RANGE_BYTES)) for lo in range(0, size, RANGE_BYTES)
            ]
    return out


def limit(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str, connections: int = 4
) -> dict[str, Any]:
    """Every object of the data set's bucket by concurrent ranged GETs of 16 MiB on
    ``connections`` connections (shardwise: 2 workers x 2 prefetch threads), read into
    memory and dropped. Its "first batch" is its first range."""
    import json

    bucket = s3["buckets"]["shardwise"][dataset]
    client = _client(s3, connections)
    ranges = _ranges(client, bucket)
    rows = json.loads((Path(data) / "meta.json").read_text())["rows"]
    first: list[float] = []
    t0 = time.perf_counter()

    def get(r: tuple[str, int, int]) -> int:
        body = client.get_object(Bucket=bucket, Key=r[0], Range=f"bytes={r[1]}-{r[2] - 1}")["Body"]
        n = len(body.read())
        if not first:
            first.append(time.perf_counter() - t0)
        return n

    def make(epoch: int) -> Iterable[Any]:
        first.clear()
        with ThreadPoolExecutor(connections) as pool:
            got = sum(pool.map(get, ranges))
        yield (got, rows)

    res = epochs(make, lambda b: ([], b[1]), consumer, Server(s3, bucket), names=("cold",))
    res["cold"]["first_batch_s"] = first[0] if first else None
    return {"connections": connections, "range_bytes": RANGE_BYTES, **res}


def _payloads(data: str) -> list[bytes]:
    """Every image of the local tars, in stored order."""
    import tarfile

    out: list[bytes] = []
    for path in sorted((Path(data) / "files").glob("*.tar")):
        with tarfile.open(path) as tar:
            for m in tar:
                f = tar.extractfile(m) if m.name.endswith(".jpg") else None
                if f is not None:
                    out.append(f.read())
    return out


def consumer_alone(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """The consumer alone, in the training process, over every image already in memory
    (read untimed), in batches of ``BATCH``: the most rows/s any loader can give when the
    consumer runs in the training process, as it does in every row."""
    t0 = time.perf_counter()
    images = _payloads(data)
    setup = time.perf_counter() - t0
    size = BATCH[dataset]

    def make(epoch: int) -> Iterable[Any]:
        for lo in range(0, len(images), size):
            yield images[lo : lo + size]

    res = epochs(make, lambda b: (b, len(b)), consumer, Server(s3, "none"), names=("cold",))
    return {"setup_s": setup, **res}


def _direct_copies(data: str, tmp: str) -> list[Path]:
    """The data set's files copied under ``tmp`` as the node cache writes its downloads:
    16 MiB ranges from a reused page-aligned buffer, past the page cache."""
    from shardwise.storage.cache.direct import open_direct, range_buffer, write_range

    out, buf = [], range_buffer(RANGE_BYTES, RANGE_BYTES)
    for src in sorted(p for p in (Path(data) / "files").iterdir() if p.is_file()):
        dst = Path(tmp) / "fill" / src.name
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.touch()
        fd, direct = os.open(dst, os.O_WRONLY), open_direct(str(dst))
        with src.open("rb", buffering=0) as f:
            at = 0
            while n := f.readinto(buf):
                direct, at = write_range(fd, direct, buf[:n], at), at + n
        os.close(fd)
        if direct >= 0:
            os.close(direct)
        out.append(dst)
    return out


def page_fill(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """The page-cache fill alone: the data set's files, written past the page cache as the
    node cache writes them (untimed), read once through it (``cold``: every page enters the
    page cache) and once again (``warm``: every page is there), into a reused buffer. A
    node cache whose warm epoch reads at the rate of local disk (whose files are in the
    page cache) pays the difference of the two passes' CPU once, in its cold epoch."""
    import json

    files = _direct_copies(data, tmp)
    rows = json.loads((Path(data) / "meta.json").read_text())["rows"]
    buf = bytearray(RANGE_BYTES)

    def make(epoch: int) -> Iterable[Any]:
        got = 0
        for path in files:
            with path.open("rb", buffering=0) as f:
                while n := f.readinto(buf):
                    got += n
        yield (got, rows)

    try:
        res = epochs(make, lambda b: ([], b[1]), consumer, Server(s3, "none"))
    finally:
        shutil.rmtree(Path(tmp) / "fill", ignore_errors=True)
    return {"range_bytes": RANGE_BYTES, **res}
