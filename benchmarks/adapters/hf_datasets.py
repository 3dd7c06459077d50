"""Hugging Face ``datasets``: streaming and map-style loaders, and the cleaning pipeline."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.loader_common import (
    BATCH,
    BUFFER,
    PREFETCH,
    WORKERS,
    Consumer,
    dict_batches,
    parquet_files,
)

__all__ = ["map_batched", "map_per_sample", "pipeline", "streaming"]


def _quiet(info: dict[str, Any]) -> None:
    import datasets

    datasets.disable_progress_bars()
    info["versions"] = {"datasets": datasets.__version__}


def streaming(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """``load_dataset(streaming=True).shuffle(buffer_size=10_000).with_format("torch")``."""
    from datasets import load_dataset
    from torch.utils.data import DataLoader

    _quiet(info)
    t0 = time.perf_counter()
    ds = load_dataset("parquet", data_files=parquet_files(data), split="train", streaming=True)
    ds = ds.shuffle(buffer_size=BUFFER, seed=0).with_format("torch")
    info["setup_s"] = time.perf_counter() - t0
    info["n_shards"] = ds.num_shards

    def go() -> None:
        dict_batches(
            DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=PREFETCH), consume
        )

    return go


def _map_style(data: Path, info: dict[str, Any]) -> Any:
    from datasets import Dataset

    _quiet(info)
    cache = Path(os.environ["BENCH_TMP"]) / "hf-cache"
    t0 = time.perf_counter()
    ds = Dataset.from_parquet(parquet_files(data), cache_dir=str(cache), keep_in_memory=False)
    info["setup_s"] = time.perf_counter() - t0
    info["setup_what"] = "Dataset.from_parquet Arrow conversion (one-time, cached by HF afterwards)"
    return ds.with_format("numpy")


def map_batched(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """Whole batches fetched by a DataLoader with a ``BatchSampler(RandomSampler)``."""
    import torch
    from torch.utils.data import BatchSampler, DataLoader, RandomSampler

    ds = _map_style(data, info)
    torch.manual_seed(0)
    sampler = BatchSampler(RandomSampler(ds), batch_size=BATCH, drop_last=False)

    def go() -> None:  # batch_size=None + a batch sampler: every fetch is ds[list_of_256_indices]
        dict_batches(
            DataLoader(
                ds, batch_size=None, sampler=sampler, num_workers=WORKERS, prefetch_factor=PREFETCH
            ),
            consume,
        )

    return go


def map_per_sample(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """The same Dataset in ``DataLoader(batch_size=256, shuffle=True)``."""
    import torch
    from torch.utils.data import DataLoader

    ds = _map_style(data, info)
    torch.manual_seed(0)

    def go() -> None:
        dict_batches(
            DataLoader(
                ds, batch_size=BATCH, shuffle=True, num_workers=WORKERS, prefetch_factor=PREFETCH
            ),
            consume,
        )

    return go


def pipeline(data: Path, out: Path) -> dict[str, Any]:
    """``map(batched, num_proc=2)``, ``filter`` on the word count, first-of-hash filter,
    ``to_parquet``."""
    import datasets
    import numpy as np
    from datasets import Dataset

    from adapters.text_chain import CORES, clean_and_hash, first_of_each, input_files, keep_words

    datasets.disable_progress_bars()
    info: dict[str, Any] = {"startup_s": 0.0, "versions": {"datasets": datasets.__version__}}
    cache = out.parent / (out.name + "-hfcache")
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    ds = Dataset.from_parquet(input_files(data), cache_dir=str(cache), keep_in_memory=False)
    info["setup_s"] = time.perf_counter() - t0
    info["setup_what"] = "Dataset.from_parquet Arrow conversion (excluded from wall_s)"
    try:
        t0 = time.perf_counter()
        ds = ds.with_format("arrow").map(clean_and_hash, batched=True, num_proc=CORES)
        ds = ds.filter(lambda b: keep_words(b["n_words"]), batched=True, num_proc=CORES)
        hashes = ds.with_format("numpy", columns=["h1", "h2"])[:]
        keep = np.zeros(len(ds), dtype=bool)
        keep[first_of_each(hashes["h1"], hashes["h2"])] = True
        ds = ds.filter(
            lambda b, idx: keep[np.asarray(idx)], batched=True, with_indices=True, num_proc=CORES
        )
        ds = ds.remove_columns(["n_words", "h1", "h2"])
        out.mkdir(parents=True, exist_ok=True)
        ds.to_parquet(str(out / "data.parquet"))  # HF sets its own per-column codec (snappy)
        info["wall_s"] = time.perf_counter() - t0
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return info
