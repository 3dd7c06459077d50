"""shardwise's ``StreamingDataset`` in a DataLoader, and the DataLoader ceiling."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.loader_common import BATCH, PREFETCH, WORKERS, Consumer, dict_batches, parquet_files

__all__ = ["batched", "batched_wide", "dataloader_ceiling", "per_sample"]

WIDE_INTERLEAVE = 64  # batched_wide: every row group of a worker (~48 of 97) mixed at once
COLUMNS = ["id", "label", "text", "emb"]


def _dataset(data: Path, batch_format: str | None, info: dict[str, Any], interleave: int | None = None) -> Any:
    import shardwise
    from shardwise.loader import StreamingDataset

    info["versions"] = {"shardwise": shardwise.__version__}
    t0 = time.perf_counter()
    ds = StreamingDataset(str(data / "parquet"), batch_size=BATCH, shuffle=True, seed=0, drop_last=True,
                          columns=COLUMNS, batch_format=batch_format, num_workers=WORKERS, progress=False,
                          interleave=interleave)
    info["interleave"] = ds.interleave  # as resolved (by default sized by shuffle_bytes)
    info["setup_s"] = time.perf_counter() - t0
    info["units"] = ds.index.num_units
    return ds


def _loader(ds: Any, consume: Consumer, batch_size: int | None) -> Callable[[], None]:
    from torch.utils.data import DataLoader

    def go() -> None:
        dict_batches(DataLoader(ds, batch_size=batch_size, num_workers=WORKERS, prefetch_factor=PREFETCH), consume)

    return go


def batched(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """``StreamingDataset(batch_format="numpy")`` in ``DataLoader(batch_size=None)``."""
    return _loader(_dataset(data, "numpy", info), consume, None)


def batched_wide(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The batched path with ``interleave=64``: memory traded for shuffle quality."""
    return _loader(_dataset(data, "numpy", info, WIDE_INTERLEAVE), consume, None)


def per_sample(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """``StreamingDataset()`` (dicts) in ``DataLoader(batch_size=256)``."""
    return _loader(_dataset(data, None, info), consume, BATCH)


def dataloader_ceiling(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The DataLoader alone: workers that read nothing and send the same pre-built batches
    of real rows (through shardwise's shared-memory transport), as many as the data has."""
    import pyarrow.parquet as pq
    from torch.utils.data import IterableDataset

    from shardwise.loader import transport
    from shardwise.loader.convert import split

    files = parquet_files(data)
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    table = pq.ParquetFile(files[0]).read_row_group(0, columns=COLUMNS)
    table = table.slice(0, table.num_rows - table.num_rows % BATCH)

    class Prebuilt(IterableDataset):  # type: ignore[type-arg,misc,unused-ignore]
        def __iter__(self) -> Any:
            transport.setup_worker("numpy")  # what shardwise does in a DataLoader worker
            batches = list(split(table, BATCH, "numpy"))
            for j in range(total // BATCH // WORKERS):
                yield batches[j % len(batches)]

    info["prebuilt_rows"] = table.num_rows
    return _loader(Prebuilt(), consume, None)
