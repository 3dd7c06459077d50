"""The dedup benchmark's scale corpus: millions of generated short documents with planted
clusters, written as Parquet (built in slices, so generating it needs little memory).

Base documents are 20-40 words drawn from the BBC articles' tokens (natural word
frequencies); 10 % of the documents are copies of a base document with its first or last
word replaced (Jaccard of word 5-grams about 0.9), several per base document at times, so
clusters of several sizes form. Each slice of ``ROWS_PER_FILE`` rows is shuffled.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from datagen import DATA_ROOT
from datagen.corpora import bbc_articles
from datagen.reuse import fresh_dir, reusable

__all__ = ["generate_scale"]

DATA_VERSION = 1
ROWS_PER_FILE = 250_000
COPY_SHARE = 0.10


def _slice(vocab: Any, rng: np.random.Generator, first_id: int, n: int) -> tuple[Any, int]:
    """``n`` documents with ids from ``first_id``: base ones and edited copies, shuffled."""
    import pyarrow as pa
    import pyarrow.compute as pc

    n_copies = int(n * COPY_SHARE)
    n_base = n - n_copies
    lengths = rng.integers(20, 41, n_base)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    toks = rng.integers(0, len(vocab), int(offsets[-1]))
    src = rng.integers(0, n_base, n_copies)  # copies of base documents (several per cluster)
    clen = lengths[src]
    cstart = np.concatenate([[0], np.cumsum(clen)])
    gather = np.repeat(offsets[src] - cstart[:-1], clen) + np.arange(int(cstart[-1]))
    ctoks = toks[gather]
    last = rng.random(n_copies) < 0.5  # replace the first or the last word
    ctoks[np.where(last, cstart[1:] - 1, cstart[:-1])] = rng.integers(0, len(vocab), n_copies)
    all_toks = np.concatenate([toks, ctoks])
    all_off = np.concatenate([offsets, offsets[-1] + cstart[1:]]).astype(np.int64)
    lists = pa.LargeListArray.from_arrays(pa.array(all_off), vocab.take(pa.array(all_toks)))
    text = pc.binary_join(lists, " ").take(pa.array(rng.permutation(n)))
    return pa.table({"id": pa.array(np.arange(first_id, first_id + n)), "text": text}), n_copies


def generate_scale(n: int, seed: int = 0) -> Path:
    """Create (or reuse) ``.data/dedup-scale-<n>/`` (Parquet files of ``ROWS_PER_FILE`` rows)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    out = DATA_ROOT / f"dedup-scale-{n}"
    if reusable(out, DATA_VERSION, docs=n):
        return out
    t0 = time.perf_counter()
    fresh_dir(out, "docs")
    vocab = pa.array([tok for text in bbc_articles() for tok in text.split()], pa.string())
    rng = np.random.default_rng(seed)
    planted = 0
    for f, lo in enumerate(range(0, n, ROWS_PER_FILE)):
        table, k = _slice(vocab, rng, lo, min(ROWS_PER_FILE, n - lo))
        planted += k
        pq.write_table(table, str(out / "docs" / f"part-{f:04d}.parquet"), row_group_size=50_000)
    meta = {
        "version": DATA_VERSION,
        "docs": n,
        "planted": planted,
        "seed": seed,
        "bytes": sum(p.stat().st_size for p in (out / "docs").glob("*.parquet")),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta))
    print(
        f"data: wrote {n:,} generated docs ({planted:,} planted copies, "
        f"{meta['bytes'] / 2**20:.0f} MB Parquet) "
        f"in {meta['generate_s']:.1f} s",
        flush=True,
    )
    return out
