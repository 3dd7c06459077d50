"""Streaming the same mixed data through shardwise and MosaicML streaming.

Three sources of different sizes (``SIZES`` rows: ``id``, ``source``, ``label`` and a
``payload`` of ``PAYLOAD`` bytes), written once as Parquet (shardwise reads it) and
converted with Mosaic's ``MDSWriter`` (timed apart, not part of any ratio). Each loader
streams one epoch of ``EPOCH`` samples mixed by ``WEIGHTS`` (the sizes are not in those
proportions: the first source is downsampled, the second upsampled 1.2x) in batches of
``BATCH``; every batch goes through the same consumer, which records each source's share
of the batch. This module is imported in both interpreters (numpy and pyarrow only at
import time; shardwise, torch and ``streaming`` inside the functions that use them).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from harness.monitor import TreeMonitor

SIZES = (150_000, 100_000, 50_000)
WEIGHTS = (0.4, 0.4, 0.2)
EPOCH = 300_000
BATCH = 256
PAYLOAD = 200
FILES_PER_SOURCE = 3
ROW_GROUP = 10_000
WORKERS = 2
QUICK_DIV = 10  # --quick: a tenth of the rows and of the epoch


def sizes(quick: bool) -> tuple[tuple[int, ...], int]:
    """The sources' row counts and the epoch size (a tenth of each with ``quick``)."""
    div = QUICK_DIV if quick else 1
    return tuple(n // div for n in SIZES), EPOCH // div


def source_rows(s: int, n: int) -> dict[str, np.ndarray]:
    """Source ``s``'s ``n`` rows as columns (deterministic; ids unique across sources)."""
    rng = np.random.default_rng(1000 + s)
    payload = np.frombuffer(rng.bytes(n * PAYLOAD), dtype=np.uint8).reshape(n, PAYLOAD)
    return {
        "id": np.arange(n, dtype=np.int64) + s * 10**8,
        "source": np.full(n, s, dtype=np.int64),
        "label": rng.integers(0, 100, size=n, dtype=np.int64),
        "payload": payload,
    }


def write_parquet(root: Path, quick: bool) -> list[Path]:
    """Each source as ``FILES_PER_SOURCE`` Parquet files under ``root/parquet/s<i>``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dirs = []
    for s, n in enumerate(sizes(quick)[0]):
        cols, d = source_rows(s, n), root / "parquet" / f"s{s}"
        d.mkdir(parents=True, exist_ok=True)
        for f, part in enumerate(np.array_split(np.arange(n), FILES_PER_SOURCE)):
            lo, hi = int(part[0]), int(part[-1]) + 1
            payload = [bytes(r) for r in cols["payload"][lo:hi]]
            table = pa.table(
                {
                    "id": cols["id"][lo:hi],
                    "source": cols["source"][lo:hi],
                    "label": cols["label"][lo:hi],
                    "payload": pa.array(payload, pa.binary()),
                }
            )
            pq.write_table(table, d / f"part-{f}.parquet", row_group_size=ROW_GROUP)
        dirs.append(d)
    return dirs


def convert_mds(*, data: str, quick: bool, **_: Any) -> dict[str, Any]:
    """Mosaic's side of the set-up: every source through ``MDSWriter`` (read from the same
    Parquet files), timed; runs in the peer venv."""
    import pyarrow.parquet as pq
    from streaming import MDSWriter

    t0, out = time.perf_counter(), {}
    kinds = {"id": "int64", "source": "int64", "label": "int64", "payload": "bytes"}
    for s in range(len(SIZES)):
        target = Path(data) / "mds" / f"s{s}"
        with MDSWriter(out=str(target), columns=kinds, size_limit=1 << 24) as w:
            for f in sorted((Path(data) / "parquet" / f"s{s}").glob("*.parquet")):
                cols = pq.read_table(f).to_pydict()
                for row in zip(
                    cols["id"], cols["source"], cols["label"], cols["payload"], strict=True
                ):
                    w.write(dict(zip(kinds, row, strict=True)))
        out[f"s{s}"] = str(target)
    return {"convert_s": time.perf_counter() - t0, "mds": out}


class ShareConsumer:
    """Counts rows and each source's rows per batch; touches labels and payload."""

    def __init__(self) -> None:
        self.rows = 0
        self.per_batch: list[np.ndarray] = []
        self.checksum = 0

    def __call__(self, batch: dict[str, Any]) -> None:
        src = np.asarray(batch["source"]).astype(np.int64, copy=False)
        self.per_batch.append(np.bincount(src, minlength=len(WEIGHTS)))
        self.checksum += int(np.asarray(batch["label"]).sum())
        payload = batch["payload"]
        self.checksum += len(payload[0]) if len(payload) else 0
        self.rows += len(src)

    def report(self, batch: int) -> dict[str, Any]:
        """Realised shares: per epoch, and per full batch (mean and worst absolute deviation
        of a source's share from its weight)."""
        counts = np.array(self.per_batch) if self.per_batch else np.zeros((0, len(WEIGHTS)))
        full = counts[counts.sum(axis=1) == batch]
        total = counts.sum(axis=0)
        epoch = total / max(1, total.sum())
        dev = (
            np.abs(full / batch - np.asarray(WEIGHTS)) if len(full) else np.zeros((1, len(WEIGHTS)))
        )
        return {
            "rows": self.rows,
            "batches": len(counts),
            "full_batches": len(full),
            "epoch_counts": total.astype(int).tolist(),
            "epoch_shares": epoch.tolist(),
            "epoch_max_dev": float(np.abs(epoch - WEIGHTS).max()),
            "batch_mean_dev": float(dev.mean()),
            "batch_max_dev": float(dev.max()),
        }


def _measure(make: Any, info: dict[str, Any]) -> dict[str, Any]:
    """Build the loader (``setup_s``), then stream it to the end through the consumer."""
    consume = ShareConsumer()
    t0 = time.perf_counter()
    loader: Iterable[dict[str, Any]] = make()
    t1 = time.perf_counter()
    mon = TreeMonitor().start()
    for batch in loader:
        consume(batch)
    t2 = time.perf_counter()
    mon.stop()
    return (
        info
        | consume.report(BATCH)
        | {
            "setup_s": t1 - t0,
            "epoch_s": t2 - t1,
            "rows_per_s": consume.rows / (t2 - t1),
            "cpu_s": mon.cpu_seconds,
            "peak_rss_mb": mon.peak_rss_mb,
            "max_procs": mon.max_procs,
        }
    )


def shardwise_epoch(
    *, data: str, quick: bool, batching: str, workers: int, **_: Any
) -> dict[str, Any]:
    """shardwise: ``StreamingDataset([Source(...)], epoch_size=, batching=, batch_format="numpy")``,
    in-process (``workers=0``) or in ``DataLoader(batch_size=None, num_workers=workers)``."""
    import shardwise
    from shardwise import Source

    def make() -> Iterable[dict[str, Any]]:
        srcs = [
            Source(str(Path(data) / "parquet" / f"s{s}"), weight=w, name=f"s{s}")
            for s, w in enumerate(WEIGHTS)
        ]
        ds = shardwise.StreamingDataset(
            srcs,
            epoch_size=sizes(quick)[1],
            batching=batching,
            batch_size=BATCH,
            shuffle=True,
            seed=0,
            drop_last=True,
            batch_format="numpy",
            num_workers=workers or None,
        )
        if not workers:
            return ds
        from torch.utils.data import DataLoader

        return DataLoader(ds, batch_size=None, num_workers=workers, prefetch_factor=8)

    return _measure(make, {"versions": {"shardwise": shardwise.__version__}, "workers": workers})


def mosaic_epoch(
    *, data: str, quick: bool, batching: str, workers: int, **_: Any
) -> dict[str, Any]:
    """Mosaic: ``StreamingDataset(streams=[Stream(local=..., proportion=...)], epoch_size=,
    batch_size=, shuffle=True, batching_method=)`` in ``DataLoader(batch_size, num_workers)``."""
    import streaming
    from streaming import Stream, StreamingDataset
    from streaming.base.util import clean_stale_shared_memory
    from torch.utils.data import DataLoader

    clean_stale_shared_memory()

    def make() -> Iterable[dict[str, Any]]:
        streams = [
            Stream(local=str(Path(data) / "mds" / f"s{s}"), proportion=w)
            for s, w in enumerate(WEIGHTS)
        ]
        ds = StreamingDataset(
            streams=streams,
            epoch_size=sizes(quick)[1],
            batch_size=BATCH,
            shuffle=True,
            shuffle_seed=0,
            batching_method=batching,
            num_canonical_nodes=1,
        )
        return DataLoader(
            ds, batch_size=BATCH, num_workers=workers, prefetch_factor=8, drop_last=True
        )

    return _measure(
        make, {"versions": {"mosaicml-streaming": streaming.__version__}, "workers": workers}
    )
