"""The S3 benchmark's systems: shardwise from local disk and from S3 through its node cache,
MosaicML streaming (MDS) and LitData (its chunks) from the same S3 server.

Every reader runs two epochs through a 2-worker ``DataLoader`` with a fresh cache: the
first is *cold* (everything comes from the server), the second *warm* (what was cached).
``s3`` holds ``endpoint``, ``key``, ``secret`` and ``bucket``. Peer functions import only
their own package (they run in the peer's virtualenv, which has no shardwise).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "litdata_convert",
    "litdata_read",
    "mosaic_convert",
    "mosaic_read",
    "shardwise_local",
    "shardwise_s3",
    "shardwise_two_jobs",
]

BATCH = 256
WORKERS = 2
EPOCHS = 2


def _consume(batches: Iterable[Any]) -> int:
    """Touch every batch's label and emb (as training would); the rows seen."""
    import numpy as np

    rows = 0
    for b in batches:
        lab = np.asarray(b["label"])
        emb = b["emb"]
        float(np.asarray(emb[0] if isinstance(emb, list) else emb).reshape(-1)[0])
        rows += len(lab)
    return rows


def _epochs(
    make_loader: Callable[[int], Iterable[Any]], fetched: Callable[[], int] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e, label in zip(range(EPOCHS), ("cold", "warm")):
        before = fetched() if fetched else None
        t0 = time.perf_counter()
        rows = _consume(make_loader(e))
        seconds = time.perf_counter() - t0
        out[f"{label}_rows"] = rows
        out[f"{label}_s"] = seconds
        out[f"{label}_rows_per_s"] = rows / seconds
        if fetched is not None and before is not None:
            out[f"{label}_fetched_bytes"] = fetched() - before
    return out


# -- shardwise ---------------------------------------------------------------------------
def _sw_options(s3: dict[str, Any]) -> dict[str, Any]:
    return {
        "key": s3["key"],
        "secret": s3["secret"],
        "client_kwargs": {"endpoint_url": s3["endpoint"]},
    }


def _sw_loader(ds: Any) -> Callable[[int], Iterable[Any]]:
    from torch.utils.data import DataLoader

    def make(epoch: int) -> Iterable[Any]:
        ds.set_epoch(epoch)
        return DataLoader(ds, batch_size=None, num_workers=WORKERS, prefetch_factor=8)

    return make


def _sw_dataset(source: str, **kw: Any) -> Any:
    from shardwise import StreamingDataset

    return StreamingDataset(
        source,
        batch_size=BATCH,
        seed=0,
        columns=["id", "label", "emb"],
        batch_format="numpy",
        num_workers=WORKERS,
        progress=False,
        **kw,
    )


def _journal_bytes(cache_dir: str) -> Callable[[], int]:
    def total() -> int:
        try:
            with open(os.path.join(cache_dir, "units", "journal.log")) as f:
                return sum(json.loads(line)["bytes"] for line in f if line.strip())
        except FileNotFoundError:
            return 0

    return total


def shardwise_local(data: str, tmp: str, s3: dict[str, Any]) -> dict[str, Any]:
    """shardwise over the local Parquet files (the reference)."""
    t0 = time.perf_counter()
    ds = _sw_dataset(str(Path(data) / "parquet"))
    return {"setup_s": time.perf_counter() - t0, **_epochs(_sw_loader(ds))}


def shardwise_s3(data: str, tmp: str, s3: dict[str, Any]) -> dict[str, Any]:
    """shardwise from S3 with a fresh node cache (``cache_dir`` in the run's scratch)."""
    cache = os.path.join(tmp, "node-cache")
    t0 = time.perf_counter()
    ds = _sw_dataset(
        f"s3://{s3['bucket']}/parquet",
        storage_options=_sw_options(s3),
        cache_dir=cache,
        cache_bytes=64 * 2**30,
    )
    return {"setup_s": time.perf_counter() - t0, **_epochs(_sw_loader(ds), _journal_bytes(cache))}


def _one_job(source: str, s3: dict[str, Any], cache: str, out: str) -> None:
    ds = _sw_dataset(
        source, storage_options=_sw_options(s3), cache_dir=cache, cache_bytes=64 * 2**30
    )
    t0 = time.perf_counter()
    rows = _consume(_sw_loader(ds)(0))
    Path(out).write_text(json.dumps({"rows": rows, "seconds": time.perf_counter() - t0}))


def shardwise_two_jobs(data: str, tmp: str, s3: dict[str, Any]) -> dict[str, Any]:
    """Two jobs at once on one node cache, each a cold epoch of the same data set."""
    import multiprocessing as mp

    cache = os.path.join(tmp, "node-cache")
    source = f"s3://{s3['bucket']}/parquet"
    ctx = mp.get_context("spawn")
    outs = [os.path.join(tmp, f"job{i}.json") for i in range(2)]
    t0 = time.perf_counter()
    procs = [ctx.Process(target=_one_job, args=(source, s3, cache, o)) for o in outs]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    wall = time.perf_counter() - t0
    jobs = [json.loads(Path(o).read_text()) for o in outs]
    # each job's own epoch (from its first batch request to its last row; start-up apart)
    return {
        "jobs": jobs,
        "wall_s": wall,
        "fetched_bytes": _journal_bytes(cache)(),
        "rows_per_s": sum(j["rows"] / j["seconds"] for j in jobs),
    }


# -- MosaicML streaming ------------------------------------------------------------------
def _table_rows(data: str) -> Iterable[dict[str, Any]]:
    import pyarrow.parquet as pq

    for f in sorted((Path(data) / "parquet").glob("*.parquet")):
        pf = pq.ParquetFile(f)
        for g in range(pf.num_row_groups):
            t = pf.read_row_group(g, columns=["id", "label", "emb"])
            ids, labels = t.column("id").to_numpy(), t.column("label").to_numpy()
            emb = t.column("emb").combine_chunks().flatten().to_numpy().reshape(len(ids), -1)
            for i in range(len(ids)):
                yield {"id": int(ids[i]), "label": int(labels[i]), "emb": emb[i]}


def mosaic_convert(data: str, tmp: str, out: str) -> dict[str, Any]:
    """Write the rows as MDS shards (its own format) into ``out``."""
    from streaming import MDSWriter

    t0 = time.perf_counter()
    cols = {"id": "int64", "label": "int64", "emb": "ndarray:float32:64"}
    with MDSWriter(out=out, columns=cols, size_limit="64mb") as w:
        for row in _table_rows(data):
            w.write(row)
    return {"convert_s": time.perf_counter() - t0}


def mosaic_read(data: str, tmp: str, s3: dict[str, Any]) -> dict[str, Any]:
    """``streaming.StreamingDataset(remote=s3://..., local=fresh dir)`` in a 2-worker DataLoader."""
    import streaming
    from streaming import StreamingDataset
    from torch.utils.data import DataLoader

    os.environ.update(
        S3_ENDPOINT_URL=s3["endpoint"],
        AWS_ACCESS_KEY_ID=s3["key"],
        AWS_SECRET_ACCESS_KEY=s3["secret"],
        AWS_DEFAULT_REGION="us-east-1",
    )
    local = os.path.join(tmp, "mds-cache")
    t0 = time.perf_counter()
    ds = StreamingDataset(
        remote=f"s3://{s3['bucket']}/mds",
        local=local,
        shuffle=True,
        shuffle_seed=0,
        batch_size=BATCH,
    )
    setup = time.perf_counter() - t0

    def make(epoch: int) -> Iterable[Any]:
        return DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=8)

    def fetched() -> int:
        return sum(f.stat().st_size for f in Path(local).rglob("*") if f.is_file())

    res = _epochs(make, fetched)
    return {"setup_s": setup, "versions": {"mosaicml-streaming": streaming.__version__}, **res}


# -- LitData -----------------------------------------------------------------------------
def litdata_convert(data: str, tmp: str, out: str) -> dict[str, Any]:
    """``litdata.optimize`` the rows (one input per Parquet file) into ``out``."""
    import litdata

    t0 = time.perf_counter()
    files = sorted(str(f) for f in (Path(data) / "parquet").glob("*.parquet"))
    litdata.optimize(fn=_lit_rows, inputs=files, output_dir=out, chunk_bytes="64MB", num_workers=2)
    return {"convert_s": time.perf_counter() - t0}


def _lit_rows(path: str) -> Iterable[dict[str, Any]]:
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    for g in range(pf.num_row_groups):
        t = pf.read_row_group(g, columns=["id", "label", "emb"])
        ids, labels = t.column("id").to_numpy(), t.column("label").to_numpy()
        emb = t.column("emb").combine_chunks().flatten().to_numpy().reshape(len(ids), -1)
        for i in range(len(ids)):
            yield {"id": int(ids[i]), "label": int(labels[i]), "emb": emb[i]}


def litdata_read(data: str, tmp: str, s3: dict[str, Any]) -> dict[str, Any]:
    """``litdata.StreamingDataset("s3://...")`` with a fresh cache dir, ``StreamingDataLoader``."""
    import litdata
    from litdata import StreamingDataLoader, StreamingDataset
    from litdata.streaming import downloader
    from litdata.streaming.resolver import Dir

    os.environ.update(
        AWS_ACCESS_KEY_ID=s3["key"],
        AWS_SECRET_ACCESS_KEY=s3["secret"],
        AWS_ENDPOINT_URL=s3["endpoint"],
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ALLOW_HTTP="true",
    )
    # its Rust S3 client refuses plain http unless told; the server is on loopback
    downloader._OBSTORE_CLIENT_OPTIONS = dict(downloader._OBSTORE_CLIENT_OPTIONS, allow_http=True)
    local = os.path.join(tmp, "litdata-cache")
    t0 = time.perf_counter()
    ds = StreamingDataset(
        Dir(path=local, url=f"s3://{s3['bucket']}/litdata"),
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
        return StreamingDataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=8)

    def fetched() -> int:
        return sum(f.stat().st_size for f in Path(local).rglob("*") if f.is_file())

    res = _epochs(make, fetched)
    return {"setup_s": setup, "versions": {"litdata": litdata.__version__}, **res}
