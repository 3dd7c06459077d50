"""The dedup benchmark's three corpus shapes, all from the shipped corpora.

* ``short``: sentences of 20-99 characters split from the BBC and news articles, and the
  Rotten Tomatoes snippets under 100 characters (reviews, titles and tweets are this
  long); planted near-duplicates are what short texts get: a word added or dropped at
  either end, a word replaced, or case and punctuation changed;
* ``medium``: the documents of :mod:`datagen.dedup_data` (articles, paragraphs, passages);
* ``long``: documents of over 5,000 words, each a run of consecutive articles; planted
  near-duplicates carry word edits at 0.5-3 % of their words.

Written like the medium corpus (two JSONL files of ``{"id", "text"}`` in id order).
"""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datagen import DATA_ROOT
from datagen.corpora import bbc_articles, news_articles, rotten_tomatoes, sentences
from datagen.dedup_data import plant, write_docs
from datagen.reuse import fresh_dir, reusable

__all__ = ["SHAPES", "generate_shape"]

DATA_VERSION = 1  # bump when the generated data changes


def short_documents() -> list[tuple[str, str]]:
    """(source, text) of every text of 20-99 characters with at least 3 words."""
    out: list[tuple[str, str]] = []
    for source, texts in (("bbc_sentence", bbc_articles()), ("news_sentence", news_articles())):
        for text in texts:
            out.extend((source, s.strip()) for s in sentences(re.sub(r"\s+", " ", text)))
    out.extend(("rotten_tomatoes", t) for t in rotten_tomatoes())
    seen: set[str] = set()
    keep = []
    for s, t in out:
        if 20 <= len(t) < 100 and len(t.split()) >= 3 and t not in seen:
            seen.add(t)
            keep.append((s, t))
    return keep


def long_documents(rng: random.Random) -> list[tuple[str, str]]:
    """(source, text) of documents of over 5,000 words: consecutive articles joined."""
    articles = [t for t in (*bbc_articles(), *news_articles()) if len(t.split()) >= 50]
    out: list[tuple[str, str]] = []
    i = 0
    while i < len(articles):
        parts, words = [], 0
        while i < len(articles) and words <= 5_000:
            parts.append(articles[i])
            words += len(articles[i].split())
            i += 1
        if words > 5_000:
            out.append(("joined_articles", "\n\n".join(parts)))
    rng.shuffle(out)
    return out


def _short_variant(text: str, vocab: list[str], rng: random.Random) -> tuple[str, int]:
    toks = text.split()
    kind = rng.randrange(4)
    if kind == 0:  # a word added at either end (a prefix like "RT", a trailing tag)
        toks.insert(0 if rng.random() < 0.5 else len(toks), rng.choice(vocab))
    elif kind == 1 and len(toks) > 3:  # a word dropped at either end
        del toks[0 if rng.random() < 0.5 else -1]
    elif kind == 2:  # a word replaced anywhere
        toks[rng.randrange(len(toks))] = rng.choice(vocab)
    else:  # case and punctuation: the same words
        return (text.upper() if rng.random() < 0.5 else text.rstrip(".!?") + "!!"), 0
    return " ".join(toks), 1


def _planted(
    base: list[tuple[str, str]],
    n: int,
    rng: random.Random,
    variant: Callable[[str, list[str], random.Random], tuple[str, int]] | None,
    rates: tuple[float, float],
) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    if variant is None:
        return plant(base, n, rng, rates)
    n_planted = max(n // 6, n - len(base))
    if len(base) > n - n_planted:
        base = [base[i] for i in sorted(rng.sample(range(len(base)), n - n_planted))]
    vocab = sorted({w for _, t in base[:: max(1, len(base) // 3000)] for w in t.split()})
    docs: list[dict[str, Any]] = [{"source": s, "text": t, "of": None} for s, t in base]
    for _ in range(n_planted):
        src = rng.randrange(len(base))
        text, k = variant(base[src][1], vocab, rng)
        docs.append({"source": "planted", "text": text, "of": src, "rate": 0.0, "edits": k})
    order = list(range(len(docs)))
    rng.shuffle(order)
    new_id = {old: i for i, old in enumerate(order)}
    shuffled = [docs[old] for old in order]
    return shuffled, [
        [i, new_id[d["of"]], 0.0, d["edits"]] for i, d in enumerate(shuffled) if d["of"] is not None
    ]


SHAPES: dict[str, dict[str, Any]] = {
    "short": {"docs": 60_000, "quick": 10_000},
    "medium": {"docs": 60_000, "quick": 10_000},
    "long": {"docs": 1_000, "quick": 300},
}


def generate_shape(shape: str, n: int, seed: int = 0) -> Path:
    """Create (or reuse) the ``shape`` corpus of ``n`` documents; returns its directory."""
    out = DATA_ROOT / (f"dedup-{n}" if shape == "medium" else f"dedup-{shape}-{n}")
    if shape == "medium":
        from datagen.dedup_data import generate

        return generate(n, seed)
    if reusable(out, DATA_VERSION, docs=n, shape=shape):
        return out
    t0 = time.perf_counter()
    fresh_dir(out, "docs")
    rng = random.Random(seed)
    if shape == "short":
        base, variant, rates = short_documents(), _short_variant, (0.0, 0.0)
    else:
        base, variant, rates = long_documents(rng), None, (0.005, 0.03)
    docs, planted = _planted(base, n, rng, variant, rates)
    words = [len(d["text"].split()) for d in docs]
    meta: dict[str, Any] = {
        "version": DATA_VERSION,
        "shape": shape,
        "docs": len(docs),
        "seed": seed,
        "base_available": len(base),
        "planted": planted,
        "words_total": sum(words),
        "words_min": min(words),
        "words_max": max(words),
        "chars_mean": sum(len(d["text"]) for d in docs) / len(docs),
        "bytes": write_docs(out, docs),
        "generate_s": time.perf_counter() - t0,
    }
    (out / "meta.json").write_text(json.dumps(meta))
    print(
        f"data: wrote {len(docs):,} {shape} docs ({meta['words_total']:,} words, "
        f"{meta['bytes'] / 2**20:.1f} MB) "
        f"to {out} in {meta['generate_s']:.1f} s",
        flush=True,
    )
    return out
