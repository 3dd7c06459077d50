"""The 2 GB S3 benchmark's peers, each in its own virtualenv (no shardwise there):
``webdataset.WebDataset`` over the same tars, LitData and MosaicML streaming over their
own formats of the same rows (the conversions are functions here too, timed apart).

Every reader runs through a 2-worker DataLoader (LitData: its ``StreamingDataLoader``),
batches of 64 images or 256 embedding rows, shuffled with seed 0, fresh local cache.
"""

from __future__ import annotations

import os
import tarfile
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from adapters.s3_epochs import EPOCHS, Server, epochs

__all__ = ["litdata_convert", "litdata_read", "mosaic_convert", "mosaic_read", "wds_read"]

BATCH = {"tars": 64, "parquet": 256}
WORKERS = 2
PREFETCH_FACTOR = 4
EMB_DIM = 768


def _aws_env(s3: dict[str, Any]) -> None:
    os.environ.update(
        AWS_ACCESS_KEY_ID=s3["key"],
        AWS_SECRET_ACCESS_KEY=s3["secret"],
        AWS_ENDPOINT_URL=s3["endpoint"],
        S3_ENDPOINT_URL=s3["endpoint"],
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )


def _unpack(image: str, label: str) -> Callable[[Any], tuple[Any, int]]:
    return lambda b: (b[image], len(b[label]))


# -- the rows, read from the local copy (for the conversions) ---------------------------
def tar_rows(path: str) -> Iterator[dict[str, Any]]:
    """``{"jpg": bytes, "cls": int}`` per sample of one tar shard, in order."""
    sample: dict[str, Any] = {}
    with tarfile.open(path) as tf:
        for m in tf:
            ext = m.name.partition(".")[2]
            f = tf.extractfile(m)
            data = f.read() if f is not None else b""
            sample[ext] = int(data) if ext == "cls" else data
            if len(sample) == 2:
                yield sample
                sample = {}


def parquet_rows(path: str) -> Iterator[dict[str, Any]]:
    """``{"id", "label", "emb"}`` per row of one Parquet file."""
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    for g in range(pf.num_row_groups):
        t = pf.read_row_group(g)
        ids, labels = t.column("id").to_numpy(), t.column("label").to_numpy()
        emb = t.column("emb").combine_chunks().flatten().to_numpy().reshape(len(ids), -1)
        for i in range(len(ids)):
            yield {"id": int(ids[i]), "label": int(labels[i]), "emb": emb[i]}


def _files(data: str) -> list[str]:
    """The data set's files (not the index shardwise may have left beside them)."""
    files = (Path(data) / "files").iterdir()
    return sorted(str(f) for f in files if f.name.endswith((".tar", ".parquet")))


def _rows_of(dataset: str) -> Callable[[str], Iterator[dict[str, Any]]]:
    return tar_rows if dataset == "tars" else parquet_rows


# -- WebDataset ----------------------------------------------------------------------------
def _s3_opener(s3: dict[str, Any]) -> Callable[..., Any]:
    """A ``gopen`` handler for ``s3://bucket/key``: a streaming GET with boto3."""
    clients: dict[int, Any] = {}

    def open_s3(url: str, mode: str = "rb", bufsize: int = 8192, **kw: Any) -> Any:
        import boto3

        pid = os.getpid()
        if pid not in clients:
            clients[pid] = boto3.client(
                "s3",
                endpoint_url=s3["endpoint"],
                aws_access_key_id=s3["key"],
                aws_secret_access_key=s3["secret"],
                region_name="us-east-1",
            )
        bucket, _, key = url[len("s3://") :].partition("/")
        return clients[pid].get_object(Bucket=bucket, Key=key)["Body"]

    return open_s3


def wds_read(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """``wds.WebDataset(s3 urls, shardshuffle=True).shuffle(1000).to_tuple("jpg", "cls")``
    over boto3 streaming GETs; no cache, so its second epoch downloads again."""
    import webdataset as wds
    from torch.utils.data import DataLoader

    wds.gopen_schemes["s3"] = _s3_opener(s3)
    bucket = s3["buckets"]["shardwise"][dataset]
    urls = [f"s3://{bucket}/{Path(f).name}" for f in _files(data)]
    t0 = time.perf_counter()
    ds = (
        wds.WebDataset(urls, shardshuffle=len(urls), seed=0, empty_check=False)
        .shuffle(1000)
        .to_tuple("jpg", "cls")
    )
    setup = time.perf_counter() - t0

    def make(epoch: int) -> Iterable[Any]:
        return DataLoader(
            ds, batch_size=BATCH[dataset], num_workers=WORKERS, prefetch_factor=PREFETCH_FACTOR
        )

    res = epochs(make, _unpack(0, 1), consumer, Server(s3, bucket))  # type: ignore[arg-type]
    return {"setup_s": setup, "versions": {"webdataset": wds.__version__}, **res}


# -- LitData -------------------------------------------------------------------------------
def litdata_convert(data: str, tmp: str, out: str, dataset: str) -> dict[str, Any]:
    """``litdata.optimize`` the rows (one input per file, 2 workers) into ``out``."""
    import litdata

    t0 = time.perf_counter()
    litdata.optimize(
        fn=_rows_of(dataset), inputs=_files(data), output_dir=out, chunk_bytes="64MB", num_workers=2
    )
    return {"convert_s": time.perf_counter() - t0}


def litdata_read(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """``litdata.StreamingDataset(s3 url, shuffle=True)``, fresh cache, StreamingDataLoader."""
    import litdata
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming import downloader
    from litdata.streaming.resolver import Dir

    _aws_env(s3)
    if hasattr(downloader, "_OBSTORE_CLIENT_OPTIONS"):  # its Rust client refuses plain http
        downloader._OBSTORE_CLIENT_OPTIONS = dict(
            downloader._OBSTORE_CLIENT_OPTIONS, allow_http=True
        )
    bucket = s3["buckets"]["litdata"][dataset]
    t0 = time.perf_counter()
    ds = StreamingDataset(
        Dir(path=os.path.join(tmp, "litdata-cache"), url=f"s3://{bucket}"),
        shuffle=True,
        seed=0,
        storage_options={
            "endpoint_url": s3["endpoint"],
            "aws_access_key_id": s3["key"],
            "aws_secret_access_key": s3["secret"],
        },
    )
    setup = time.perf_counter() - t0

    def make(epoch: int) -> Iterable[Any]:
        ds.set_epoch(epoch + 1)
        return StreamingDataLoader(
            ds, batch_size=BATCH[dataset], num_workers=WORKERS, prefetch_factor=PREFETCH_FACTOR
        )

    unpack = _unpack("jpg", "cls") if dataset == "tars" else _unpack("emb", "label")
    res = epochs(make, unpack, consumer, Server(s3, bucket))
    return {"setup_s": setup, "versions": {"litdata": litdata.__version__}, **res}


# -- MosaicML streaming --------------------------------------------------------------------
def mosaic_convert(data: str, tmp: str, out: str, dataset: str) -> dict[str, Any]:
    """Write the rows as MDS shards of 64 MB into ``out``."""
    from streaming import MDSWriter

    cols = (
        {"jpg": "bytes", "cls": "int"}
        if dataset == "tars"
        else {"id": "int64", "label": "int64", "emb": f"ndarray:float32:{EMB_DIM}"}
    )
    t0 = time.perf_counter()
    with MDSWriter(out=out, columns=cols, size_limit="64mb") as w:
        for f in _files(data):
            for row in _rows_of(dataset)(f):
                w.write(row)
    return {"convert_s": time.perf_counter() - t0}


def mosaic_read(
    data: str, tmp: str, s3: dict[str, Any], dataset: str, consumer: str
) -> dict[str, Any]:
    """``streaming.StreamingDataset(remote=s3://..., local=fresh dir, shuffle=True)``."""
    import streaming
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader

    _aws_env(s3)
    # shared memory an earlier run left (a killed one's) makes it index the wrong shards
    streaming.base.util.clean_stale_shared_memory()
    bucket = s3["buckets"]["mosaic"][dataset]
    t0 = time.perf_counter()
    ds = StreamingDataset(
        remote=f"s3://{bucket}",
        local=os.path.join(tmp, "mds-cache"),
        shuffle=True,
        shuffle_seed=0,
        batch_size=BATCH[dataset],
    )
    setup = time.perf_counter() - t0

    def make(epoch: int) -> Iterable[Any]:
        return DataLoader(
            ds, batch_size=BATCH[dataset], num_workers=WORKERS, prefetch_factor=PREFETCH_FACTOR
        )

    unpack = _unpack("jpg", "cls") if dataset == "tars" else _unpack("emb", "label")
    res = epochs(make, unpack, consumer, Server(s3, bucket), names=EPOCHS)
    return {"setup_s": setup, "versions": {"mosaicml-streaming": streaming.__version__}, **res}
