"""Token stream rows run in the peers' venvs: LitData ``TokensLoader`` and MosaicML
streaming over MDS token shards. Each converts the benchmark's documents once (timed
apart, ``convert_*``), then streams concat sequences of ``seq_len`` tokens in batches of
``batch_size`` as int64 (``stream_*``: one process, no DataLoader workers, shuffled, like
the shardwise row). Input: ``flat.npy`` (every document's tokens, EOS-terminated, back to
back) and ``offsets.npy`` (the documents' offsets) of the stream data directory."""

from __future__ import annotations

import functools
import shutil
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["convert_litdata", "convert_mosaic", "stream_litdata", "stream_mosaic"]

DOCS_PER_ITEM = 1024  # documents per item handed to litdata.optimize (TokensLoader flattens)


def _lit_items(data: str, span: tuple[int, int]) -> Iterator[Any]:
    import torch

    flat = np.load(f"{data}/flat.npy", mmap_mode="r")
    off = np.load(f"{data}/offsets.npy")
    lo, hi = span
    yield torch.from_numpy(np.array(flat[off[lo] : off[hi]]))


def convert_litdata(data: str, out: str, seq_len: int, **_: Any) -> dict[str, Any]:
    """``litdata.optimize(..., item_loader=TokensLoader())`` on 2 workers: token chunks."""
    from litdata import TokensLoader, optimize

    shutil.rmtree(out, ignore_errors=True)
    n = len(np.load(f"{data}/offsets.npy")) - 1
    spans = [(lo, min(lo + DOCS_PER_ITEM, n)) for lo in range(0, n, DOCS_PER_ITEM)]
    t0 = time.perf_counter()
    optimize(
        fn=functools.partial(_lit_items, data),
        inputs=spans,
        output_dir=out,
        chunk_size=(seq_len + 1) * 1024,
        item_loader=TokensLoader(),
        num_workers=2,
    )
    return {"seconds": time.perf_counter() - t0, "tokens": int(np.load(f"{data}/offsets.npy")[-1])}


def stream_litdata(out: str, seq_len: int, batch_size: int, **_: Any) -> dict[str, Any]:
    """``StreamingDataset(item_loader=TokensLoader(block_size=seq_len), shuffle=True)`` in a
    ``StreamingDataLoader(batch_size, num_workers=0)``; batches cast to int64."""
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    t0 = time.perf_counter()
    ds = StreamingDataset(out, item_loader=TokensLoader(block_size=seq_len), shuffle=True, seed=1)
    loader = StreamingDataLoader(ds, batch_size=batch_size, num_workers=0, drop_last=True)
    tokens = 0
    for batch in loader:
        tokens += batch.long().numel()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "tokens": tokens, "tok_per_s": tokens / seconds}


def convert_mosaic(data: str, out: str, seq_len: int, **_: Any) -> dict[str, Any]:
    """``MDSWriter`` of concat samples (``seq_len`` tokens as bytes, llm-foundry's
    ``concat_tokens`` layout), uncompressed, 64 MB shards."""
    from streaming import MDSWriter

    shutil.rmtree(out, ignore_errors=True)
    flat = np.load(f"{data}/flat.npy", mmap_mode="r")
    t0 = time.perf_counter()
    with MDSWriter(out=out, columns={"tokens": "bytes"}, size_limit="64mb") as w:
        for i in range(0, len(flat) - seq_len + 1, seq_len):
            w.write({"tokens": flat[i : i + seq_len].tobytes()})
    return {"seconds": time.perf_counter() - t0, "tokens": len(flat) // seq_len * seq_len}


def stream_mosaic(out: str, seq_len: int, batch_size: int, **_: Any) -> dict[str, Any]:
    """``streaming.StreamingDataset(local=<MDS>, shuffle=True)`` in a torch ``DataLoader``
    (``num_workers=0``); each sample's bytes as uint16, the batch stacked as int64."""
    import torch
    from streaming import StreamingDataset
    from streaming.base.util import clean_stale_shared_memory

    clean_stale_shared_memory()
    t0 = time.perf_counter()
    ds = StreamingDataset(local=out, shuffle=True, shuffle_seed=1, batch_size=batch_size)

    def collate(samples: list[dict[str, Any]]) -> Any:
        rows = [np.frombuffer(s["tokens"], dtype=np.uint16) for s in samples]
        return torch.from_numpy(np.stack(rows).astype(np.int64))

    loader = torch.utils.data.DataLoader(
        ds, batch_size=batch_size, num_workers=0, collate_fn=collate, drop_last=True
    )
    tokens = 0
    for batch in loader:
        tokens += batch.numel()
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "tokens": tokens, "tok_per_s": tokens / seconds}
