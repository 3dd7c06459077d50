"""WebDataset: ``wds.WebDataset(urls, shardshuffle=True).shuffle(10_000).decode()``."""

from __future__ import annotations

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
    tar_files,
)
from adapters.versions import dist_version

__all__ = ["loader"]


def loader(data: Path, consume: Consumer, info: dict[str, Any]) -> Callable[[], None]:
    """Per-sample decoding in a DataLoader of 2 workers, batches of 256."""
    import webdataset as wds
    from torch.utils.data import DataLoader

    info["versions"] = {
        "webdataset": getattr(wds, "__version__", None) or dist_version("webdataset")
    }

    def sample(s: dict[str, Any]) -> dict[str, Any]:
        meta = s["json"]
        return {"id": meta["id"], "label": meta["label"], "text": s["txt"], "emb": s["npy"]}

    ds = (
        wds.WebDataset(tar_files(data), shardshuffle=True, seed=0, empty_check=False)
        .shuffle(BUFFER)
        .decode()
        .map(sample)
    )

    def go() -> None:
        dict_batches(
            DataLoader(ds, batch_size=BATCH, num_workers=WORKERS, prefetch_factor=PREFETCH), consume
        )

    return go
