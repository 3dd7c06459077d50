"""shardwise's ``StreamingDataset``: in the training process (its threaded fast path) and in
a DataLoader with workers; and the DataLoader ceiling."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.loader_common import (
    BATCH,
    PREFETCH,
    WORKERS,
    Consumer,
    columns,
    dict_batches,
    parquet_files,
)

__all__ = [
    "batched",
    "batched_wide",
    "dataloader_ceiling",
    "first_epoch",
    "first_epoch_heads",
    "first_epoch_whole",
    "inproc_dataloader",
    "inproc_numpy",
    "inproc_numpy_epoch2",
    "inproc_torch",
    "per_sample",
]

WIDE_INTERLEAVE = 64  # batched_wide: every row group of a worker (~48 of 97) mixed at once


def _dataset(
    data: Path,
    batch_format: str | None,
    info: dict[str, Any],
    interleave: int | None = None,
    num_workers: int | None = WORKERS,
    first_window: str | None = "auto",
) -> Any:
    import shardwise
    from shardwise.loader import StreamingDataset

    info["versions"] = {"shardwise": shardwise.__version__}
    t0 = time.perf_counter()
    ds = StreamingDataset(
        str(data / "parquet"),
        batch_size=BATCH,
        shuffle=True,
        seed=0,
        drop_last=True,
        columns=columns(data),
        batch_format=batch_format,
        num_workers=num_workers,
        progress=False,
        interleave=interleave,
        # the default ("auto" since 2026-11-28) is not passed: a --before tree may predate it
        **({} if first_window == "auto" else {"first_window": first_window}),
    )
    info["blocks"] = getattr(ds, "blocks", 1)  # head windows' k (1: whole units)
    info["interleave"] = ds.interleave  # as resolved (by default sized by shuffle_bytes)
    info["shuffle_bytes"], info["prefetch_bytes"] = ds.shuffle_bytes, ds.prefetch_bytes
    if num_workers is None:
        info["threads"] = ds.num_threads
    info["setup_s"] = time.perf_counter() - t0
    info["units"] = ds.index.num_units
    return ds


def _loader(ds: Any, consume: Consumer, batch_size: int | None) -> Callable[[], None]:
    from torch.utils.data import DataLoader

    def go() -> None:
        dict_batches(
            DataLoader(ds, batch_size=batch_size, num_workers=WORKERS, prefetch_factor=PREFETCH),
            consume,
        )

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


def _all_units(data: Path) -> int:
    """The in-process rows mix every row group at once (one window: the memory of the
    decoded data set, as a map-style loader holds it): on label-sorted data two windows
    give batches that lean to half the labels each (TVD ~0.076), one window ~0.015."""
    return int(json.loads((data / "meta.json").read_text())["row_groups"])


def inproc_numpy(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The in-process path: ``for batch in StreamingDataset(batch_format="numpy")``."""
    ds = _dataset(data, "numpy", info, _all_units(data), num_workers=None)
    return lambda: dict_batches(ds, consume)


def first_epoch(
    data: Path, consume: Consumer, info: dict[str, Any], first_window: str | None = "auto"
) -> Callable[[], None]:
    """What a training job gets: the first epoch of a fresh process, in the training process
    (``for batch in StreamingDataset(batch_format="numpy")``, default ``interleave``), the
    dataset's construction timed with it; torch and shardwise are imported before the clock
    starts (shardwise's import time is reported as ``import_s``)."""
    import torch  # noqa: F401  (a training process has it; its import is not the loader's)

    t0 = time.perf_counter()  # shardwise's import, apart (the raw scans import pyarrow untimed)
    # the name itself: ``shardwise.loader`` loads ``StreamingDataset``'s modules (and with them
    # pyarrow.compute, 0.2-0.4 s) lazily, on first use, which was inside the clock until
    # 2026-11-28 (round two; see results/loader-first-epoch-round2-2026-11-28.md)
    from shardwise.loader import StreamingDataset  # noqa: F401

    info["import_s"] = time.perf_counter() - t0

    def go() -> None:
        ds = _dataset(data, "numpy", info, num_workers=None, first_window=first_window)
        dict_batches(ds, consume)

    return go


def first_epoch_heads(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """:func:`first_epoch` with ``first_window="heads"`` (every unit's head read first)."""
    return first_epoch(data, consume, info, "heads")


def first_epoch_whole(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """:func:`first_epoch` with ``first_window=None`` (whole units: the default until
    2026-11-28, when ``"auto"`` became it)."""
    return first_epoch(data, consume, info, None)


def inproc_torch(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The in-process path with torch tensors: ``for batch in
    StreamingDataset(batch_format="torch")``."""
    ds = _dataset(data, "torch", info, _all_units(data), num_workers=None)
    return lambda: dict_batches(ds, consume)


def inproc_numpy_epoch2(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The in-process numpy row's second epoch: the first runs untimed in the same process
    (a training run's steady state; the dataset keeps its window memory)."""
    ds = _dataset(data, "numpy", info, _all_units(data), num_workers=None)
    for _ in ds:
        pass
    ds.set_epoch(1)
    return lambda: dict_batches(ds, consume)


def inproc_dataloader(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The in-process path through ``DataLoader(ds, batch_size=None, num_workers=0)`` (torch)."""
    from torch.utils.data import DataLoader

    ds = _dataset(data, "torch", info, _all_units(data), num_workers=None)
    return lambda: dict_batches(DataLoader(ds, batch_size=None, num_workers=0), consume)


def dataloader_ceiling(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The DataLoader alone: workers that read nothing and send the same pre-built batches
    of real rows (through shardwise's shared-memory transport), as many as the data has."""
    import pyarrow.parquet as pq
    from torch.utils.data import IterableDataset

    from shardwise.loader.batches.piece_maker import PieceMaker
    from shardwise.loader.workers import setup
    from shardwise.loader.workers.transport import travel_for

    files = parquet_files(data)
    total = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    table = pq.ParquetFile(files[0]).read_row_group(0, columns=columns(data))
    table = table.slice(0, table.num_rows - table.num_rows % BATCH)

    class Prebuilt(IterableDataset):  # type: ignore[type-arg,misc,unused-ignore]
        def __iter__(self) -> Any:
            setup.setup_worker("numpy")  # what shardwise does in a DataLoader worker
            maker = PieceMaker("numpy", BATCH, travel=travel_for("numpy"))
            batches = [b for b, _ in maker.table_batches(table)]
            for j in range(total // BATCH // WORKERS):
                yield batches[j % len(batches)]

    info["prebuilt_rows"] = table.num_rows
    return _loader(Prebuilt(), consume, None)
