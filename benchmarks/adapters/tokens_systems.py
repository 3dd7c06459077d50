"""Token benchmark rows run in shardwise's interpreter: the tokenize operator, the
``tokenizers.encode_batch`` limit, ``TokenStream`` and the raw ``np.memmap`` loop, the
token plan at scale."""

from __future__ import annotations

import glob
import json
import multiprocessing as mp
import resource
import time
from pathlib import Path
from typing import Any

import numpy as np
from harness.monitor import TreeMonitor

__all__ = ["encode_batch", "memmap_loop", "plan_scale", "shardwise_stream", "shardwise_tokenize"]


def shardwise_tokenize(data: str, tokenizer: str, procs: int, tmp: str, **_: Any) -> dict[str, Any]:
    """The pipeline: JSONL -> tokenize (eos) -> Parquet token shards, on ``procs`` processes."""
    from shardwise.pipeline import read_jsonl

    mon = TreeMonitor().start()
    t0 = time.perf_counter()
    result = (
        read_jsonl(f"{data}/text-*.jsonl", task_bytes=8 * 2**20)
        .apply("tokenize", tokenizer=tokenizer, eos="<|endoftext|>")
        .apply("drop_columns", columns=["text"])
        .write(f"{tmp}/out")
        .run(backend="local" if procs > 1 else "sequential", num_proc=procs, progress=False)
    )
    seconds = time.perf_counter() - t0
    mon.stop()
    return {"seconds": seconds, "tokens": result.tokens_out, "peak_rss_mb": mon.peak_rss_mb}


def _encode_file(args: tuple[str, str]) -> int:
    from tokenizers import Tokenizer

    path, tok_path = args
    tok = Tokenizer.from_file(tok_path)
    eos = tok.token_to_id("<|endoftext|>")
    n = 0
    with open(path, encoding="utf-8") as f:
        texts = [json.loads(line)["text"] for line in f]
    for i in range(0, len(texts), 1000):
        for e in tok.encode_batch_fast(texts[i : i + 1000], add_special_tokens=False):
            ids = np.asarray([*e.ids, eos], dtype=np.uint16)
            n += len(ids)
    return n


def encode_batch(data: str, tokenizer: str, procs: int, **_: Any) -> dict[str, Any]:
    """The limit: ``encode_batch`` over the JSONL files into uint16 arrays, nothing written."""
    files = sorted(glob.glob(f"{data}/text-*.jsonl"))
    mon = TreeMonitor().start()
    t0 = time.perf_counter()
    if procs == 1:
        tokens = sum(_encode_file((f, tokenizer)) for f in files)
    else:
        with mp.get_context("spawn").Pool(procs) as pool:
            tokens = sum(pool.map(_encode_file, [(f, tokenizer) for f in files]))
    seconds = time.perf_counter() - t0
    mon.stop()
    return {"seconds": seconds, "tokens": tokens, "peak_rss_mb": mon.peak_rss_mb}


def shardwise_stream(
    data: str,
    seq_len: int,
    batch_size: int,
    packing: str = "concat",
    fields: tuple[str, ...] | None = None,
    shuffle: bool = True,
    **_: Any,
) -> dict[str, Any]:
    """One epoch of ``TokenStream`` in this process (every field: input_ids, labels,
    position_ids, document_ids, loss_mask, cu_seqlens; or ``fields``), shuffled or in file
    order, opening included (``open_s``: the opening alone)."""
    from shardwise.loader.tokens import TokenStream

    kw = {"fields": tuple(fields)} if fields else {}
    t0 = time.perf_counter()
    ds = TokenStream(
        f"{data}/shards",
        seq_len=seq_len,
        batch_size=batch_size,
        packing=packing,
        shuffle=shuffle,
        **kw,
    )
    opened = time.perf_counter() - t0
    tokens = 0
    for b in ds:
        tokens += b["input_ids"].size
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "open_s": opened, "tokens": tokens, "tok_per_s": tokens / seconds}


def memmap_loop(
    data: str, seq_len: int, batch_size: int, shuffle: bool = False, **_: Any
) -> dict[str, Any]:
    """The physical limit for pre-tokenized data: each batch materialised as one int64
    ``[batch_size, seq_len]`` array (what a DataLoader hands a model) off one flat
    ``np.memmap``: consecutive slices of the file (``shuffle=False``), or the file's
    sequences in a seeded random order, one slice copy per sequence into the batch (the
    order every other row streams in; nanoGPT's ``get_batch`` copies its rows this way)."""
    t0 = time.perf_counter()
    flat = np.load(f"{data}/flat.npy", mmap_mode="r")
    step = seq_len * batch_size
    tokens = 0
    if not shuffle:
        for i in range(0, len(flat) - step + 1, step):
            x = np.array(flat[i : i + step], dtype=np.int64).reshape(batch_size, seq_len)
            tokens += x.size
    else:
        starts = np.random.default_rng(1).permutation(len(flat) // seq_len) * seq_len
        for j in range(0, len(starts) - batch_size + 1, batch_size):
            x = np.empty((batch_size, seq_len), dtype=np.int64)
            for i, a in enumerate(starts[j : j + batch_size].tolist()):
                x[i] = flat[a : a + seq_len]
            tokens += x.size
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "tokens": tokens, "tok_per_s": tokens / seconds}


def plan_scale(tokens: float, docs: int, ranks: int, seq_len: int, **_: Any) -> dict[str, Any]:
    """A concat token plan of ``tokens`` in ``docs`` documents (log-normal lengths, 1,000 per
    unit) for ``ranks`` ranks: plan, one rank's sequences, an elastic resume."""
    from shardwise.plan import Topology
    from shardwise.plan.tokens import TokenPlan

    rng = np.random.default_rng(0)
    lengths = rng.lognormal(0.0, 1.0, docs)
    lengths = np.maximum(1, lengths * (tokens / lengths.sum())).astype(np.int64)
    per_unit = np.full(docs // 1000, 1000)
    t0 = time.perf_counter()
    plan = TokenPlan(lengths, per_unit, seq_len, Topology(ranks, 1, 1), seed=1)
    planned = time.perf_counter() - t0
    plan.worker(ranks - 1).pairs()
    worker = time.perf_counter() - t0 - planned
    t1 = time.perf_counter()
    moved = plan.resume(plan.batches_per_rank // 2, Topology(ranks // 2, 2, 2))
    moved.worker(7, 1).pairs()
    resumed = time.perf_counter() - t1
    return {
        "seconds": planned,
        "worker_s": worker,
        "resume_s": resumed,
        "tokens": int(lengths.sum()),
        "sequences": int(plan.counts.sum()),
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def write_stream_data(root: Path, tokens: int, lengths: np.ndarray, vocab: int) -> None:
    """Synthetic token ids with ``lengths``' distribution (resampled to ``tokens``), as
    token shards (the tokenize layout: the token column uncompressed, one
    ``DELTA_LENGTH_BYTE_ARRAY`` page per row group of 4,096 documents) and one flat file."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from shardwise._tokens import TokenInfo, token_array
    from shardwise.formats.parquet.writer import _column_options

    rng = np.random.default_rng(1)
    n = int(tokens / lengths.mean()) + 1
    doc_len = rng.choice(lengths, n)
    flat = rng.integers(1, vocab, int(doc_len.sum()), dtype=np.uint16)
    offsets = np.concatenate([[0], np.cumsum(doc_len)])
    flat[offsets[1:] - 1] = 0  # eos
    np.save(root / "flat.npy", flat)
    np.save(root / "offsets.npy", offsets)
    info = TokenInfo("<u2", vocab, 0, None, "synthetic")
    (root / "shards").mkdir(parents=True, exist_ok=True)
    per_file = 65_536
    for f, lo in enumerate(range(0, n, per_file)):
        hi = min(lo + per_file, n)
        off = offsets[lo : hi + 1] - offsets[lo]
        arr = token_array(flat[offsets[lo] : offsets[hi]], off)
        counts = pa.array(np.diff(off).astype(np.int32))
        table = pa.Table.from_arrays(
            [arr, counts],
            schema=pa.schema([info.field("tokens"), pa.field("num_tokens", pa.int32())]),
        )
        pq.write_table(  # the options tokenize's writer uses
            table,
            root / "shards" / f"part-{f:05d}.parquet",
            row_group_size=4096,
            **_column_options(table.to_batches()[0], "zstd"),
        )
